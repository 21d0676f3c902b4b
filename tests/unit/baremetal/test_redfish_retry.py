"""The lab's Redfish client (gpufleet.baremetal.bmc over sushy) retries a refused connection (the emulator restarting)
and nothing else."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from gpufleet.lab.redfish import Client, Credentials, RedfishError

# A Redfish service root without a SessionService (sushy then logs in with HTTP basic auth) and one system.
ROOT = {
    "@odata.id": "/redfish/v1/",
    "Id": "RootService",
    "RedfishVersion": "1.6.0",
    "Systems": {"@odata.id": "/redfish/v1/Systems"},
}
SYSTEMS = {"@odata.id": "/redfish/v1/Systems", "Members": [{"@odata.id": "/redfish/v1/Systems/abc"}]}


class _Systems(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        docs = {"/redfish/v1/": ROOT, "/redfish/v1": ROOT, "/redfish/v1/Systems": SYSTEMS}
        if self.path not in docs:
            self.send_error(404)
            return
        body = json.dumps(docs[self.path]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def late_server():
    """A BMC that starts answering 1.5 s from now (as the lab's emulator does after a restart)."""
    port = _free_port()
    holder: dict[str, HTTPServer] = {}

    def start() -> None:
        time.sleep(1.5)
        holder["server"] = HTTPServer(("127.0.0.1", port), _Systems)
        holder["server"].serve_forever()

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    yield Credentials(f"http://127.0.0.1:{port}", "u", "p")
    while "server" not in holder:
        time.sleep(0.1)
    holder["server"].shutdown()
    holder["server"].server_close()


def test_a_refused_connection_is_retried_until_the_bmc_answers(late_server: Credentials):
    started = time.monotonic()
    assert Client(late_server, timeout=5, retry_seconds=20).systems() == ["abc"]
    assert time.monotonic() - started >= 1.0


def test_without_retries_a_refused_connection_fails_at_once(late_server: Credentials):
    with pytest.raises(RedfishError, match="unreachable \\(connection refused\\)"):
        Client(late_server, timeout=5, retry_seconds=0).systems()


def test_an_http_error_is_not_retried(late_server: Credentials):
    client = Client(late_server, timeout=5, retry_seconds=20)
    client.systems()  # the server is up
    started = time.monotonic()
    with pytest.raises(RedfishError, match="has no system 'nope' \\(its systems: abc\\)"):
        client.system("nope")
    assert time.monotonic() - started < 15  # a retry would wait the whole retry_seconds (20 s)
