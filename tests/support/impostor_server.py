"""A server posing as judgeflow's local Prefect server, for a second local user to run
(``/usr/bin/python3`` alone: the other account cannot execute the suite's venv): it answers
``/api/health`` as Prefect does and 401 to anything else, as a server wanting the auth
string would, and appends every request it receives (path, all headers, body) to a log
as JSON lines. Its first line is ``{"pid": ..., "port": ...}``.

    python3 impostor_server.py PORT LOG
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, LOG = int(sys.argv[1]), sys.argv[2]


def record(entry):
    with open(LOG, "a") as out:
        out.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        record({"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body})
        status, text = (200, b"true") if self.path.rstrip("/").endswith("/api/health") else (401, b"{}")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
record({"pid": os.getpid(), "port": PORT})
server.serve_forever()
