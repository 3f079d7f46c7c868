"""A stand-in for Phoenix's REST API, for the write-back's outbox in the default suite
(the real Phoenix is behind ``--slow``: tests/support/phoenix.py). A stdlib
ThreadingHTTPServer on 127.0.0.1 speaking the shape judgeflow uses:

- ``POST /v1/span_annotations?sync=true`` with ``{"data": [annotation, ...]}``: each
  annotation is kept per (span, name, identifier), a second write replacing the first,
  as Phoenix does; a batch naming a span the receiver does not know is refused whole
  (404), as Phoenix refuses a batch for one span it does not hold;
- ``GET /v1/projects``: ``{"data": [...]}``.

``spans`` are the span ids it knows (None: every span). With ``api_key`` set, a request
without ``Authorization: Bearer <api_key>`` is answered 401. ``status`` forces an
answer to every request (503, say). ``port`` binds a given port, so a receiver can be
stopped (nothing listening) and come back on the same URL.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class PhoenixReceiver:
    def __init__(self, *, spans: set[str] | None = None, api_key: str | None = None, port: int = 0,
                 status: int | None = None):
        self.spans = spans
        self.api_key = api_key
        self.status = status
        self.annotations: dict[tuple[str, str, str], dict] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status answered)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                with receiver._lock:
                    receiver.requests.append((self.command, urlparse(self.path).path, status))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused(self) -> bool:
                if receiver.status is not None:
                    self._answer(receiver.status, {"detail": "forced"})
                    return True
                if receiver.api_key and self.headers.get("Authorization") != f"Bearer {receiver.api_key}":
                    self._answer(401, {"detail": "Invalid token"})
                    return True
                return False

            def do_GET(self):  # noqa: N802
                if self._refused():
                    return
                if urlparse(self.path).path != "/v1/projects":
                    return self._answer(404, {"detail": "Not Found"})
                self._answer(200, {"data": [{"id": "UHJvamVjdDox", "name": "default"}], "next_cursor": None})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self._refused():
                    return
                if urlparse(self.path).path != "/v1/span_annotations":
                    return self._answer(404, {"detail": "Not Found"})
                data = body.get("data") or []
                unknown = [a["span_id"] for a in data if receiver.spans is not None and a["span_id"] not in receiver.spans]
                if unknown:
                    return self._answer(404, {"detail": f"Span with ID {unknown[0]} not found"})
                with receiver._lock:
                    for a in data:
                        receiver.annotations[(a["span_id"], a["name"], a["identifier"])] = a
                self._answer(200, {"data": [{"id": str(i)} for i in range(len(data))]})

            def log_message(self, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "PhoenixReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def posts(self) -> list[int]:
        """The statuses answered to the annotation POSTs, in order."""
        return [s for m, p, s in self.requests if m == "POST"]
