"""A fault-injecting HTTP proxy for tests: it stands in front of a real server (the lab's sushy-emulator) and, for the
requests a rule matches, answers 500 or 503 itself, resets the connection, or sends the start of a response and then
hangs, as a failing BMC does; every other request is forwarded as it is. Each rule fires a given number of times.

Only what a Redfish client needs: HTTP/1.1 requests with a Content-Length body (no chunked uploads), one request per
connection (the proxy answers ``Connection: close``).
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import requests

Fault = Literal["500", "503", "reset", "hang"]


@dataclass
class Rule:
    """``fault`` for the next ``times`` requests whose method and path match."""

    method: str
    path: str  # a regular expression, searched in the request's path
    fault: Fault
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method == self.method and re.search(self.path, path) is not None


@dataclass
class FaultProxy:
    upstream: str
    port: int = 0
    rules: list[Rule] = field(default_factory=list)
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, what the proxy did)
    hang_s: float = 120.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fault(self, method: str, path: str, fault: Fault, times: int = 1) -> None:
        with self._lock:
            self.rules.append(Rule(method, path, fault, times))

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    rule.times -= 1
                    return rule.fault
        return None

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            head, body = _read_request(conn)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            fault = self._take(method, path)
            self.seen.append((method, path, fault or "forwarded"))
            if fault in ("500", "503"):
                reason = "Internal Server Error" if fault == "500" else "Service Unavailable"
                text = b'{"error": {"message": "injected by the test\'s fault proxy"}}'
                conn.sendall(
                    f"HTTP/1.1 {fault} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(text)}\r\n"
                    "Connection: close\r\n\r\n".encode()
                    + text
                )
                return
            if fault == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return  # closing with linger 0 sends RST
            upstream = requests.request(
                method,
                self.upstream + path,
                headers={k: v for k, v in headers.items() if k.lower() not in ("host", "connection")},
                data=body,
                timeout=60,
                allow_redirects=False,
            )
            out = f"HTTP/1.1 {upstream.status_code} {upstream.reason}\r\n"
            for k, v in upstream.headers.items():
                if k.lower() not in ("connection", "transfer-encoding", "content-length", "content-encoding"):
                    out += f"{k}: {v}\r\n"
            content = upstream.content
            out += f"Content-Length: {len(content)}\r\nConnection: close\r\n\r\n"
            if fault == "hang":  # the headers and half the body, then nothing
                conn.sendall(out.encode("latin-1") + content[: len(content) // 2])
                self._stop.wait(self.hang_s)
                return
            conn.sendall(out.encode("latin-1") + content)

    def serve(self, server: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def forwarded(self, method: str, path: str) -> int:
        """How many requests matching ``method`` and ``path`` reached the server behind the proxy."""
        return sum(1 for m, p, did in self.seen if m == method and re.search(path, p) and did in ("forwarded", "hang"))


def _read_request(conn: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


@contextmanager
def fault_proxy(upstream: str, hang_s: float = 120.0) -> Iterator[FaultProxy]:
    """A proxy to ``upstream`` on a free port of 127.0.0.1, stopped (and its hung responses released) on exit."""
    server = socket.create_server(("127.0.0.1", 0))
    proxy = FaultProxy(upstream, server.getsockname()[1], hang_s=hang_s)
    thread = threading.Thread(target=proxy.serve, args=(server,), daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy._stop.set()
        server.close()
        thread.join(timeout=5)
