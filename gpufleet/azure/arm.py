"""Azure Resource Manager reads for ``gpufleet preflight``: a region's Resource SKUs and compute usages through
``azure-mgmt-compute``'s ``ComputeManagementClient`` (``resource_skus.list(filter="location eq '<region>'")``,
``usage.list(<region>)``), signed in with ``azure-identity``'s ``DefaultAzureCredential``, each answer cached for
:data:`CACHE_MINUTES` under ``$GPUFLEET_CACHE/azure/`` (default ``~/.cache/gpufleet/azure/``) with the time it was
read. The judgement is :mod:`gpufleet.azure.preflight`'s; this module only reads, caches and says why a read gave no
answer (:class:`ArmError`: one line, never a traceback).

The Azure SDK is imported when a read happens, so no other command pays for its import.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpufleet.azure.preflight import (
    Preflight,
    Read,
    judge,
    not_checked,
    parse_skus,
    parse_usages,
    pool_needs,
    subscription_of,
)
from gpufleet.common.atomic import write_atomic

if TYPE_CHECKING:
    from gpufleet.catalog import Catalog
    from gpufleet.spec.load import LoadedStack

Api = Literal["skus", "usages"]
# The API versions read: Resource SKUs' only stable one (reference, section 2); compute usages at the version
# azure-mgmt-compute 39 speaks. Pinned here, so a newer SDK changes neither the answer's shape nor the cache key.
API_VERSIONS: dict[Api, str] = {"skus": "2021-07-01", "usages": "2026-04-01"}
API_NAMES: dict[Api, str] = {"skus": "Resource SKUs", "usages": "compute usages"}
ARM_URL_ENV = "GPUFLEET_AZURE_ARM_URL"  # another ARM endpoint (a sovereign cloud's; the tests' local server)
DEFAULT_ENDPOINT = "https://management.azure.com"
# How long an answer is reused: quota moves when someone deploys, so minutes, not hours (Karpenter's Azure provider
# refreshes usages every 10 minutes too); long enough that `validate` + `preflight` + a promotion in one CI run read
# ARM once.
CACHE_MINUTES = 10
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60  # a region's Resource SKUs are a few MB


class ArmError(Exception):
    """Why a read gave no answer, in one line; ``kind`` says whether another read would fare better (``credentials``
    and ``network`` fail the same way for every read)."""

    def __init__(self, message: str, kind: Literal["credentials", "network", "http", "answer"]) -> None:
        super().__init__(message)
        self.kind = kind


def _first_line(text: object) -> str:
    return " ".join(str(text).strip().split("\n")[0].split())[:240]


def explain(exc: Exception, api: Api, subscription: str, endpoint: str) -> ArmError:
    """An Azure SDK error as one line a user can act on."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        DecodeError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, ClientAuthenticationError) and exc.response is None:  # no token at all
        return ArmError(
            f"no Azure credentials: {_first_line(exc.message)} Sign in (az login), or set AZURE_CLIENT_ID,"
            " AZURE_TENANT_ID and AZURE_CLIENT_SECRET (docs/azure.md)",
            "credentials",
        )
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        code = getattr(exc.error, "code", None) or exc.reason or ""
        status = f"HTTP {exc.status_code} {code}".strip()
        if exc.status_code == 401:
            return ArmError(f"ARM refused the credential ({status}): sign in again (az login)", "credentials")
        if exc.status_code == 403:
            return ArmError(
                f"the credential may not read {API_NAMES[api]} ({status}): it needs Reader on subscription"
                f" {subscription}",
                "http",
            )
        if exc.status_code == 404:
            return ArmError(f"ARM does not know subscription {subscription} ({status})", "http")
        return ArmError(f"ARM answered {status} for {API_NAMES[api]}: {_first_line(exc.message)}", "http")
    if isinstance(exc, ServiceRequestError):
        return ArmError(f"cannot reach ARM at {endpoint}: {_first_line(exc.message)}", "network")
    if isinstance(exc, ServiceResponseError):
        return ArmError(f"ARM at {endpoint} gave no answer: {_first_line(exc.message)}", "network")
    if isinstance(exc, (DecodeError, ValueError)):
        return ArmError(f"ARM's answer for {API_NAMES[api]} is not JSON: {_first_line(exc)}", "answer")
    return ArmError(f"reading {API_NAMES[api]} failed: {type(exc).__name__}: {_first_line(exc)}", "http")


@dataclass
class Arm:
    """One subscription's ARM, read through ``azure-mgmt-compute``. ``credential``: any azure-core token credential
    (default ``DefaultAzureCredential``); ``base_url``: the ARM endpoint (default ``$GPUFLEET_AZURE_ARM_URL``, else
    Azure's public cloud); ``connection_verify``: True, or a CA bundle's path."""

    subscription: str
    base_url: str | None = None
    credential: Any = None
    connection_verify: bool | str = True
    _client: Any = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return (self.base_url or os.environ.get(ARM_URL_ENV) or DEFAULT_ENDPOINT).rstrip("/")

    def client(self) -> Any:
        if self._client is None:
            from azure.mgmt.compute import ComputeManagementClient

            # azure-identity logs each failed credential of its chain as a warning (Python's last-resort handler
            # prints it on stderr); its one-line summary is in the ArmError, so the log stays out of the output
            azure_log = logging.getLogger("azure")
            if not any(isinstance(h, logging.NullHandler) for h in azure_log.handlers):
                azure_log.addHandler(logging.NullHandler())

            if self.credential is None:
                from azure.identity import DefaultAzureCredential

                self.credential = DefaultAzureCredential()
            self._client = ComputeManagementClient(
                self.credential,
                self.subscription,
                base_url=self.endpoint,
                connection_verify=self.connection_verify,
                connection_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S,
                # ARM's throttling answers 429 with Retry-After, which the retry policy honours; a refused
                # connection is tried once more, not for half a minute
                retry_total=3,
                retry_connect=1,
                retry_backoff_factor=0.5,
                retry_backoff_max=8,
            )
        return self._client

    def rows(self, api: Api, region: str) -> list[Any]:
        """Every row of one list (all pages), as the JSON Azure sent; :class:`ArmError` when there is no answer."""
        from azure.core.exceptions import AzureError

        client = self.client()
        try:
            if api == "skus":
                items = client.resource_skus.list(filter=f"location eq '{region}'", api_version=API_VERSIONS[api])
            else:
                items = client.usage.list(region, api_version=API_VERSIONS[api])
            return [item.as_dict() if hasattr(item, "as_dict") else item for item in items]
        except (AzureError, ValueError) as exc:
            raise explain(exc, api, self.subscription, self.endpoint) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self.credential is not None and hasattr(self.credential, "close"):
            self.credential.close()


# -- the cache --------------------------------------------------------------------------------------------------


def cache_root() -> Path:
    """``$GPUFLEET_CACHE/azure`` (default ``~/.cache/gpufleet/azure``): the same root as the lab's downloads."""
    from gpufleet.common.paths import cache_dir

    return cache_dir() / "azure"


def cache_file(endpoint: str, subscription: str, region: str, api: Api) -> Path:
    """One answer's file: per ARM endpoint, subscription, region and API (with its version)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", endpoint.split("://", 1)[-1])
    return cache_root() / host / subscription / region / f"{api}-{API_VERSIONS[api]}.json"


def _cached(path: Path, now: dt.datetime) -> tuple[list[Any], dt.datetime] | None:
    """The rows and read time of a cached answer younger than :data:`CACHE_MINUTES`; None when there is none (or
    it is unreadable: it is read again)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        read_at = dt.datetime.fromisoformat(doc["read_at"])
        rows = doc["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(rows, list) or read_at.tzinfo is None:
        return None
    age = now - read_at
    return (rows, read_at) if dt.timedelta(0) <= age < dt.timedelta(minutes=CACHE_MINUTES) else None


def read(arm: Arm, api: Api, region: str, *, refresh: bool = False, now: dt.datetime | None = None) -> Read:
    """One list for one region: from the cache when a fresh answer is there (unless ``refresh``), else from ARM
    (then cached). :class:`ArmError` when ARM gives no answer."""
    now = now or dt.datetime.now(dt.UTC)
    path = cache_file(arm.endpoint, arm.subscription, region, api)
    found = None if refresh else _cached(path, now)
    if found is not None:
        rows, read_at = found
        return Read(api, API_VERSIONS[api], read_at, True, tuple(rows))
    rows = arm.rows(api, region)
    doc = {"api": api, "api_version": API_VERSIONS[api], "endpoint": arm.endpoint, "read_at": now.isoformat()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({**doc, "rows": rows}) + "\n")
    except OSError:
        pass  # a cache that cannot be written only costs the next run a read
    return Read(api, API_VERSIONS[api], now, False, tuple(rows))


def run_preflight(
    loaded: LoadedStack,
    catalog: Catalog | None = None,
    *,
    deployed: bool = False,
    refresh: bool = False,
    arm: Arm | None = None,
    now: dt.datetime | None = None,
    environ: Mapping[str, str] | None = None,
) -> Preflight:
    """Ask ARM about a validated stack's pools and judge the answers. ``arm``: how to reach ARM (default: the
    stack's subscription, ``DefaultAzureCredential``); every read that fails makes its checks "not checked"."""
    from gpufleet.catalog import load_catalog

    stack = loaded.stack
    assert stack is not None, "preflight runs on a valid stack"
    needs = pool_needs(loaded, catalog or load_catalog(), deployed=deployed)
    subscription, source = subscription_of(loaded, environ)
    report = Preflight(stack.name, stack.region, subscription, source, deployed)
    if not needs:
        return report
    if subscription is None:
        return report.with_checks(not_checked(needs, source))
    own = arm is None
    arm = arm or Arm(subscription)
    reads: dict[str, Read] = {}
    errors: dict[str, ArmError] = {}
    try:
        for api in API_VERSIONS:
            earlier = next(iter(errors.values()), None)
            if earlier is not None and earlier.kind in ("credentials", "network"):
                errors[api] = earlier  # the same credential or network fails the same way: not asked twice
                continue
            try:
                reads[api] = read(arm, api, stack.region, refresh=refresh, now=now)
            except ArmError as exc:
                errors[api] = exc
    finally:
        if own:
            arm.close()
    skus = skipped = None
    if "skus" in reads:
        skus, skipped = parse_skus(reads["skus"].rows, stack.region)
    usages = None
    if "usages" in reads:
        usages, skipped_usages = parse_usages(reads["usages"].rows)
        skipped = [*(skipped or []), *skipped_usages]
    checks = judge(
        needs,
        stack.region,
        skus,
        usages,
        skipped or [],
        skus_unknown=str(errors.get("skus", "")),
        usages_unknown=str(errors.get("usages", "")),
    )
    return report.with_checks(checks, tuple(reads.values()), tuple(skipped or ()))
