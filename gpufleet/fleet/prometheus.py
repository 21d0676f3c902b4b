"""A small client of the Prometheus HTTP API (``/api/v1/query``), for ``gpufleet rightsize``.

Only instant queries: every question rightsize asks is aggregated over the window by Prometheus itself
(``quantile_over_time``, ``max_over_time``, ``avg_over_time``, ``count_over_time``), so one sample per series comes
back however long the window is (:mod:`gpufleet.fleet.usage` lists the queries).

Credentials come from the environment, never from the command line (where ``ps`` and shell history see them):
``GPUFLEET_PROMETHEUS_TOKEN`` (a bearer token), or ``GPUFLEET_PROMETHEUS_USER`` and ``GPUFLEET_PROMETHEUS_PASSWORD``
(basic auth). TLS certificates are verified (the system's CA store; ``SSL_CERT_FILE`` names another bundle).
Every failure is a :class:`PrometheusError` with a one-line message.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How long the first request (build info) may take before the server is called unreachable, and how long a query
# may run (Prometheus is also told, so it stops the query rather than keep working for nobody).
CONNECT_TIMEOUT_S = 5.0
QUERY_TIMEOUT_S = 120.0

TOKEN_ENV = "GPUFLEET_PROMETHEUS_TOKEN"
USER_ENV = "GPUFLEET_PROMETHEUS_USER"
PASSWORD_ENV = "GPUFLEET_PROMETHEUS_PASSWORD"

_DURATION = re.compile(r"^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_UNITS = (7 * 86400, 86400, 3600, 60, 1)


class PrometheusError(RuntimeError):
    """Prometheus could not be asked, or refused the question; the message is one line."""


def duration_seconds(text: str) -> int:
    """A Prometheus duration (``30s``, ``7d``, ``36h``, ``1d12h``, ``90m``) in seconds; ValueError otherwise."""
    m = _DURATION.match(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise ValueError(f"{text!r} is not a duration: a number and a unit (w, d, h, m, s), e.g. 7d, 36h or 1d12h")
    return sum(int(v) * unit for v, unit in zip(m.groups(), _UNITS, strict=True) if v)


def parse_window(text: str) -> int:
    """A measuring window (:func:`duration_seconds`, at least a minute) in seconds; ValueError with the reason."""
    seconds = duration_seconds(text)
    if seconds < 60:
        raise ValueError(f"a window of {text} is too short to measure anything: at least 1m")
    return seconds


@dataclass(frozen=True)
class Sample:
    """One series of an instant query's answer: its labels and its value."""

    labels: Mapping[str, str]
    value: float


def _auth_header(env: Mapping[str, str]) -> dict[str, str]:
    token = env.get(TOKEN_ENV)
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user or password:
        if not (user and password):
            raise PrometheusError(f"basic auth needs both {USER_ENV} and {PASSWORD_ENV} set")
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


class Prometheus:
    """The HTTP API of one Prometheus server (``url``: its base, e.g. ``https://prometheus.example:9090``)."""

    def __init__(self, url: str, env: Mapping[str, str] | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PrometheusError(f"{url!r} is not a Prometheus URL: http(s)://host[:port][/path]")
        self.url = url.rstrip("/")
        self._headers = {"Accept": "application/json", **_auth_header(os.environ if env is None else env)}

    def _get(self, path: str, params: Mapping[str, str], timeout: float) -> Any:
        import http.client
        import urllib.error
        import urllib.request

        query = urllib.parse.urlencode(params)
        request = urllib.request.Request(f"{self.url}{path}?{query}" if query else f"{self.url}{path}")
        for name, value in self._headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{self.url}{path}: HTTP {exc.code} {_error_text(exc)}") from None
        except urllib.error.URLError as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {exc.reason}") from None
        except (TimeoutError, ConnectionError, http.client.HTTPException, OSError) as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {exc or type(exc).__name__}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.url}{path} answered something other than JSON: is it Prometheus?") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            detail = doc.get("error", "no error given") if isinstance(doc, dict) else "not an API answer"
            raise PrometheusError(f"{self.url}{path}: {detail}")
        return doc.get("data")

    def version(self) -> str:
        """The server's version (``/api/v1/status/buildinfo``): the first request, with a short timeout, so an
        unreachable server is said within seconds."""
        data = self._get("/api/v1/status/buildinfo", {}, CONNECT_TIMEOUT_S)
        return str(data.get("version", "unknown")) if isinstance(data, dict) else "unknown"

    def query(self, promql: str, at: float) -> list[Sample]:
        """An instant query evaluated at ``at`` (Unix seconds): one sample per series of the answer."""
        data = self._get(
            "/api/v1/query",
            {"query": promql, "time": f"{at:.3f}", "timeout": f"{int(QUERY_TIMEOUT_S)}s"},
            QUERY_TIMEOUT_S + 5,
        )
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise PrometheusError(f"query {promql!r}: expected an instant vector, got {data.get('resultType')!r}")
        samples = []
        for item in data.get("result", []):
            try:
                samples.append(Sample(dict(item["metric"]), float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                raise PrometheusError(f"query {promql!r}: a malformed series in the answer") from None
        return samples


def _error_text(exc: Any) -> str:
    try:
        doc = json.loads(exc.read())
        return str(doc.get("error", exc.reason))
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)
