#!/usr/bin/env bash
# Unpack a Debian 12 package without installing it (no root): sourced by scripts/install_promtool.sh and
# scripts/install_fence_agents.sh, which keep only the files the tests run.
#   unpack_deb PACKAGE VERSION DIR   fetches PACKAGE=VERSION with `apt-get download` (bookworm's current version when
#                                    a point release has dropped the pinned one, saying so) and unpacks it into DIR/root

unpack_deb() {
  local package=$1 version=$2 dir=$3
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "gpufleet: apt-get and dpkg-deb are needed to fetch Debian's $package $version" >&2
    return 1
  fi
  if ! (cd "$dir" && timeout 300 apt-get download -q "$package=$version" </dev/null >/dev/null 2>"$dir/err"); then
    # a Debian point release replaces the package and its archive drops the old version: take bookworm's current one
    if (cd "$dir" && timeout 300 apt-get download -q "$package" </dev/null >/dev/null 2>>"$dir/err"); then
      echo "gpufleet: $package $version is no longer offered; installing $(dpkg-deb -f "$dir/${package}"_*.deb Version) instead" >&2
    else
      echo "gpufleet: apt-get download $package=$version failed: $(tail -1 "$dir/err") (run apt-get update first)" >&2
      return 1
    fi
  fi
  dpkg-deb -x "$dir/${package}"_*.deb "$dir/root"
}
