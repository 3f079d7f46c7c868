"""An HTTP server that records what arrives, the Authorization header above all:
for tests that a key is (or is not) sent to a host. Binds where it is told, so a
test can put it on a non-loopback address of this machine
(:func:`tests.support.addresses.non_loopback_address`). Answers every request
with ``status`` and an empty JSON object."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Arrival:
    method: str
    path: str
    authorization: str | None
    api_key: str | None  # the api-key / x-api-key header some providers use


class KeyRecorder:
    def __init__(self, host: str, *, status: int = 500):
        self.arrivals: list[Arrival] = []
        lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    recorder.arrivals.append(Arrival(
                        self.command, self.path, self.headers.get("Authorization"),
                        self.headers.get("api-key") or self.headers.get("x-api-key")))
                body = b"{}"
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _record  # noqa: N815

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="key-recorder", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def keys_seen(self) -> list[str]:
        """Every credential that arrived, as sent."""
        return [v for a in self.arrivals for v in (a.authorization, a.api_key) if v]

    def __enter__(self) -> "KeyRecorder":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
