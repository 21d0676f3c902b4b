"""The lab's secrets (the BMC password, its bcrypt htpasswd) are owner-only from the moment the file exists: created
with mode 0600, not written with the umask's mode and narrowed afterwards (a reader racing the chmod, or a crash
between the two, would see them)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpufleet.lab import redfish
from gpufleet.lab.config import write_private


@pytest.fixture
def no_chmod_afterwards(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache in tmp_path, a permissive umask, and chmod after the fact disabled: only the mode a file is created
    with counts."""
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    monkeypatch.setattr(Path, "chmod", lambda *_a, **_k: None)
    monkeypatch.setattr(os, "chmod", lambda *_a, **_k: None)
    old = os.umask(0o022)
    yield tmp_path
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_bmc_credentials_are_created_owner_only(no_chmod_afterwards: Path):
    creds = redfish.credentials()
    path = no_chmod_afterwards / "lab" / "redfish.json"
    assert mode(path) == 0o600
    assert redfish.credentials() == creds  # read back, not regenerated


def test_the_htpasswd_is_created_owner_only(no_chmod_afterwards: Path):
    redfish._write_config([], redfish.Credentials("http://127.0.0.1:1", "gpufleet", "secret"))
    assert mode(no_chmod_afterwards / "lab" / "redfish.htpasswd") == 0o600


def test_an_existing_readable_file_becomes_owner_only_before_the_secret_is_written(tmp_path: Path):
    path = tmp_path / "secret"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert (path.read_text(), mode(path)) == ("new", 0o600)


def test_a_symlink_is_not_followed(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "secret").symlink_to(target)
    with pytest.raises(OSError):
        write_private(tmp_path / "secret", "new")
    assert target.read_text() == "keep"
