"""A local webhook receiver for alert tests: a stdlib ThreadingHTTPServer on
127.0.0.1 in a background thread that records every POST and answers with
scripted statuses::

    with WebhookReceiver(script=[500, 500, 200]) as hook:   # then `default`
        settings = make_settings(alert_webhook_url=hook.url)
        ...
        assert [r.status for r in hook.requests] == [500, 500, 200]

A script entry is a status code, or ``(delay_s, status)`` to answer late
(the client's timeout usually fires first); ``default`` is either too, and may
be changed while the receiver runs (a receiver that recovers). A 404 echoes the
path it was asked for in its body, as many servers do (a Slack-style URL's
path holds its token).

With ``secret``, every request is checked the way docs/alerts.md tells
receivers to: by the ``verify`` function of its "Verifying the signature"
example, loaded from the page itself (``Received.verified``); and
:meth:`WebhookReceiver.accepted` de-duplicates on the (signed) delivery id. ``port`` binds a given port: a
receiver that is down (nothing listening) and later comes back on the same URL::

    port = free_port()                       # nothing listens: connection refused
    ...
    with WebhookReceiver(port=port) as hook: # back up
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered
    at: float
    verified: bool | None = None  # the docs' verify() over it (None: the receiver has no secret)

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


class WebhookReceiver:
    def __init__(
        self,
        script: list[int | tuple[float, int]] | None = None,
        default: int | tuple[float, int] = 200,
        port: int = 0,
        secret: str | None = None,
    ):
        self.script = list(script or [])
        self.default = default
        verify = docs_verify() if secret else None
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    step = receiver.script.pop(0) if receiver.script else receiver.default
                delay, status = step if isinstance(step, tuple) else (0.0, step)
                verified = None if verify is None else verify(secret, dict(self.headers), body)
                with receiver._lock:
                    receiver.requests.append(
                        Received(self.path, dict(self.headers), body, status, time.time(), verified)
                    )
                if delay:
                    time.sleep(delay)
                if status == 404:  # as many servers do: the path it was asked for, echoed
                    payload = json.dumps({"error": f"no such hook: {self.path}"}).encode()
                else:
                    payload = b'{"ok": true}' if status < 400 else b'{"error": "scripted failure"}'
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="webhook-receiver", daemon=True
        )

    @property
    def url(self) -> str:
        return self.url_for("/hook")

    def url_for(self, path: str) -> str:
        """This receiver's URL with another path (e.g. a Slack-style one holding a token)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def ids(self) -> list[str | None]:
        """The X-Judgeflow-Delivery header of every request, in order."""
        with self._lock:
            return [r.header("X-Judgeflow-Delivery") for r in self.requests]

    def delivered(self) -> list[Received]:
        """Requests answered with a 2xx."""
        with self._lock:
            return [r for r in self.requests if 200 <= r.status < 300]

    def accepted(self) -> list[Received]:
        """What a receiver following docs/alerts.md acts on: answered 2xx, the
        signature verified (when there is a secret), each delivery id once."""
        seen: set[str | None] = set()
        out = []
        for r in self.delivered():
            if r.verified is False or r.header("X-Judgeflow-Delivery") in seen:
                continue
            seen.add(r.header("X-Judgeflow-Delivery"))
            out.append(r)
        return out

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def docs_verify():
    """The ``verify(secret, headers, raw_body)`` of docs/alerts.md's signature
    example, as a receiver would copy it."""
    text = DOCS.read_text()
    section = text[text.index("Verifying the signature"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[: code.index("```")]
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOCS), "exec"), namespace)
    return namespace["verify"]


def free_port() -> int:
    """A port nothing listens on now (the OS's pick; closed again at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def url_on(port: int) -> str:
    return f"http://127.0.0.1:{port}/hook"
