"""A stand-in for Phoenix's REST API, for the write-back's outbox and `db check` in the
default suite (the real Phoenix is behind ``--slow``: tests/support/phoenix.py). A stdlib
ThreadingHTTPServer on 127.0.0.1 answering as Phoenix 20.26 does (probed against it):

- ``GET /v1/projects``: ``{"data": [...]}`` (JSON);
- any other GET: Phoenix's web page (HTML, 200): a URL with a wrong prefix
  (``http://host:6006/v1``) answers every read;
- ``POST /v1/span_annotations?sync=true`` with ``{"data": [annotation, ...]}``: each
  annotation is kept per (span, name, identifier), a second write replacing the first;
  a batch naming spans the receiver does not know is refused whole with 404 and a plain
  text naming every one of them (``Spans with IDs a, b do not exist.``); no annotation
  at all: ``{"data": []}``;
- ``POST /v1/session_annotations?sync=true``: the same for sessions (by ``session_id``, the session's
  ``session.id``), kept in ``session_annotations``; a batch naming sessions it does not know (``sessions``;
  None: every one) is refused whole with 404 ``{"detail": "Sessions with IDs a, b do not exist."}``;
- a POST to any other path: 405 ``Method Not Allowed`` (plain text), or
  ``wrong_post_status`` (404: another server in front of Phoenix).

``spans`` are the span ids it knows (None: every span). With ``api_key`` set, a request
without ``Authorization: Bearer <api_key>`` is answered 401; ``read_only_key`` reads but
is refused writing (403). ``status`` forces an answer to every request (503, say).
``port`` binds a given port, so a receiver can be stopped (nothing listening) and come
back on the same URL. ``delay_s`` holds every POST that long before answering.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

PAGE = b"<!DOCTYPE html>\n<html><head><title>Phoenix</title></head><body><div id=\"root\"></div></body></html>"


class PhoenixReceiver:
    def __init__(self, *, spans: set[str] | None = None, api_key: str | None = None, port: int = 0,
                 status: int | None = None, read_only_key: str | None = None, wrong_post_status: int = 405,
                 delay_s: float = 0.0, sessions: set[str] | None = None):
        self.spans = spans
        self.sessions = sessions
        self.session_annotations: dict[tuple[str, str, str], dict] = {}
        self.api_key = api_key
        self.read_only_key = read_only_key
        self.status = status
        self.wrong_post_status = wrong_post_status
        self.delay_s = delay_s
        self.annotations: dict[tuple[str, str, str], dict] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status answered)
        self.answered_at: list[float] = []  # time.time() each POST was answered
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, data: bytes, kind: str) -> None:
                with receiver._lock:
                    receiver.requests.append((self.command, urlparse(self.path).path, status))
                    if self.command == "POST":
                        receiver.answered_at.append(time.time())
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, status: int, body: dict) -> None:
                self._send(status, json.dumps(body).encode(), "application/json")

            def _text(self, status: int, text: str) -> None:
                self._send(status, text.encode(), "text/plain; charset=utf-8")

            def _refused(self, writing: bool) -> bool:
                if receiver.status is not None:
                    self._answer(receiver.status, {"detail": "forced"})
                    return True
                token = self.headers.get("Authorization")
                if receiver.read_only_key and token == f"Bearer {receiver.read_only_key}":
                    if writing:
                        self._text(403, "Forbidden")
                        return True
                    return False
                if receiver.api_key and token != f"Bearer {receiver.api_key}":
                    self._text(401, "Invalid token")
                    return True
                return False

            def do_GET(self):  # noqa: N802
                if urlparse(self.path).path != "/v1/projects":
                    return self._send(200, PAGE, "text/html; charset=utf-8")  # the web app, for any other page
                if self._refused(writing=False):
                    return
                self._answer(200, {"data": [{"id": "UHJvamVjdDox", "name": "default"}], "next_cursor": None})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                time.sleep(receiver.delay_s)  # a Phoenix that hangs a while
                if urlparse(self.path).path == "/v1/session_annotations" and not self._refused(writing=True):
                    return self._sessions(body.get("data") or [])
                if urlparse(self.path).path != "/v1/span_annotations":
                    return self._text(receiver.wrong_post_status, "Method Not Allowed"
                                      if receiver.wrong_post_status == 405 else "Not Found")
                if self._refused(writing=True):
                    return
                data = body.get("data") or []
                unknown = [a["span_id"] for a in data if receiver.spans is not None and a["span_id"] not in receiver.spans]
                if unknown:
                    return self._text(404, f"Spans with IDs {', '.join(unknown)} do not exist.")
                with receiver._lock:
                    for a in data:
                        receiver.annotations[(a["span_id"], a["name"], a["identifier"])] = a
                self._answer(200, {"data": [{"id": str(i)} for i in range(len(data))]})

            def _sessions(self, data: list[dict]) -> None:
                known = receiver.sessions
                unknown = [a["session_id"] for a in data if known is not None and a["session_id"] not in known]
                if unknown:
                    return self._answer(404, {"detail": f"Sessions with IDs {', '.join(unknown)} do not exist."})
                with receiver._lock:
                    for a in data:
                        receiver.session_annotations[(a["session_id"], a["name"], a["identifier"])] = a
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
