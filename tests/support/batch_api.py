"""OpenAI's Files and Batches API, served by the judge server (:mod:`tests.support.judge_server`).

The endpoints litellm's batch functions call with ``custom_llm_provider="openai"``
and an ``api_base`` (through the OpenAI client)::

    POST /v1/files                  multipart: file (JSONL), purpose=batch
    GET  /v1/files/{id}             the file object
    GET  /v1/files/{id}/content     its bytes
    POST /v1/batches                input_file_id, endpoint, completion_window "24h", metadata
    GET  /v1/batches/{id}           the batch object
    POST /v1/batches/{id}/cancel
    GET  /v1/batches                a page of batches (limit, after), newest first

A batch goes ``validating -> in_progress -> finalizing -> completed`` on the
server's own thread, ``turnaround_s`` after it was created, whether or not
anyone polls (the client that submitted it may be gone). A file that is not
one request per line, repeats a ``custom_id``, names another endpoint or mixes
models fails the batch (``failed``, with ``errors``) as OpenAI does.

Each line is answered as a chat request (:meth:`JudgeServer.answer`: the
script, the faults, the responder; no latency and no hold, which are the
online path's): a 200 goes to the output file, any other status to the error
file, each line as OpenAI writes it::

    {"id": "batch_req_...", "custom_id": "...", "response": {"status_code": 200,
     "request_id": "...", "body": <chat completion or error body>}, "error": null}

Lines not answered when a batch expires (:meth:`BatchAPI.expire`) go to the
error file with ``"response": null, "error": {"code": "batch_expired", ...}``;
a cancelled batch keeps the lines answered before the cancel in its output
file. Answered lines are billed at ``batch_discount`` of the server's prices
(:meth:`JudgeServer.bill`).

Test controls: :meth:`hold` keeps every batch in progress (answering nothing)
until :meth:`release`; :meth:`hold_from` only the n-th batch created and the
later ones (a night's later rounds); :meth:`answer_held` lets a held batch answer
its first lines (one part-way through when it is cancelled); :meth:`hide_from` runs them to the end
but tells a client they are still in progress (a run that has not seen the
completion yet) until :meth:`release`; :meth:`mute_creation_from` creates the n-th batch and the later
ones but replies to their creation only at :meth:`release` (a client killed in between); :meth:`expire`; :meth:`fail_file_reads` answers the
next reads of a file's content with a 503 (the provider's outage as a run collects); the counters
``batches_created``, ``files_uploaded``, ``lines_received`` (per batch), ``file_reads_failed``, also in
``GET /stats``, and :meth:`custom_ids_received` (how often each ``custom_id``
came in, over every batch).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from tests.support.judge_server import JudgeServer

WINDOW_S = 24 * 3600
CHAT_ENDPOINT = "/v1/chat/completions"
TERMINAL = ("completed", "failed", "expired", "cancelled")
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def as_object(self) -> dict:
        return {"id": self.id, "object": "file", "bytes": len(self.data), "created_at": self.created_at,
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "status_details": None}


@dataclass
class _Line:
    custom_id: str
    body: dict
    result: dict | None = None  # the line as written to the output or error file
    ok: bool = False


def _error(status: int, message: str, code: str | None = None) -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def _parse_lines(data: bytes) -> tuple[list[_Line], list[dict]]:
    """The requests of an input file, or the errors that fail its batch."""
    lines: list[_Line] = []
    errors: list[dict] = []
    seen: set[str] = set()
    models: set[str] = set()
    for number, text in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            item = json.loads(text)
            custom_id, body = str(item["custom_id"]), item["body"]
            if not isinstance(body, dict):
                raise TypeError("body is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            errors.append({"code": "invalid_json_line", "line": number, "param": None,
                           "message": f"line {number} is not a batch request: {exc}"})
            continue
        if item.get("url") != CHAT_ENDPOINT or item.get("method", "POST") != "POST":
            errors.append({"code": "invalid_url", "line": number, "param": "url",
                           "message": f"line {number}: url must be POST {CHAT_ENDPOINT}"})
        if custom_id in seen:
            errors.append({"code": "duplicate_custom_id", "line": number, "param": "custom_id",
                           "message": f"line {number}: custom_id {custom_id!r} is not unique"})
        seen.add(custom_id)
        models.add(str(body.get("model")))
        lines.append(_Line(custom_id, body))
    if len(models) > 1:
        errors.append({"code": "mismatched_model", "line": None, "param": "model",
                       "message": f"a batch file must ask one model, not {sorted(models)}"})
    if not lines and not errors:
        errors.append({"code": "empty_file", "line": None, "param": None, "message": "the input file is empty"})
    return lines, errors


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """{field: (filename, bytes)} of a multipart/form-data body."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


class BatchAPI:
    """The files and batches of one :class:`JudgeServer` (see the module doc)."""

    def __init__(self, judge: "JudgeServer", *, turnaround_s: float = 0.05, batch_discount: float = 0.5):
        if not 0 < batch_discount <= 1:
            raise ValueError("batch_discount must be in (0, 1]")
        self.judge = judge
        self.turnaround_s = turnaround_s
        self.batch_discount = batch_discount
        self._changed = threading.Condition(threading.RLock())
        self._holding = False
        self._hold_from: int | None = None  # hold the batches created as this one (1-based) or later
        self._hide_from: int | None = None  # report them in progress though they ended
        self._held_answers = 0  # the lines a held batch answers all the same
        self._failing_reads = 0  # the next reads of a file's content that answer 503
        self._mute_from: int | None = None  # the batches created as this one (1-based) or later get no reply
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, dict] = {}  # id -> the batch object as served
        self._lines: dict[str, list[_Line]] = {}
        self._thread: threading.Thread | None = None
        self.reset_counters()

    # ---- test controls and counters -----------------------------------------

    def reset_counters(self) -> None:
        with self._changed:
            self.batches_created = 0
            self.files_uploaded = 0
            self.lines_received: dict[str, int] = {}  # batch id -> lines in its input file
            self.file_reads_failed = 0  # reads of a file's content answered 503 (fail_file_reads)

    def stats(self) -> dict[str, Any]:
        with self._changed:
            statuses: dict[str, int] = {}
            for batch in self.batches.values():
                statuses[batch["status"]] = statuses.get(batch["status"], 0) + 1
            return {"batches_created": self.batches_created, "files_uploaded": self.files_uploaded,
                    "lines_received": dict(self.lines_received), "batch_statuses": statuses,
                    "file_reads_failed": self.file_reads_failed}

    def hold(self) -> None:
        """Keep every batch in progress, answering nothing, until :meth:`release`."""
        with self._changed:
            self._holding = True

    def hold_from(self, n: int) -> None:
        """Keep the ``n``-th batch created (1-based) and every later one in progress until :meth:`release`."""
        with self._changed:
            self._hold_from = n

    def answer_held(self, n: int) -> None:
        """A held batch (:meth:`hold`, :meth:`hold_from`) answers its first ``n`` lines all the same, then waits."""
        with self._changed:
            self._held_answers = n
            self._changed.notify_all()

    def hide_from(self, n: int) -> None:
        """Run the ``n``-th batch created and the later ones, but report them ``in_progress`` until :meth:`release`."""
        with self._changed:
            self._hide_from = n

    def mute_creation_from(self, n: int) -> None:
        """Create the ``n``-th batch and the later ones, but keep back the reply to their creation until
        :meth:`release`: the client is left not knowing a batch the provider has (killed meanwhile)."""
        with self._changed:
            self._mute_from = n

    def fail_file_reads(self, n: int) -> None:
        """The next ``n`` reads of a file's content answer 503, as a provider's outage does."""
        with self._changed:
            self._failing_reads = n

    def release(self) -> None:
        with self._changed:
            self._holding = False
            self._hold_from = self._hide_from = self._mute_from = None
            self._held_answers = 0
            self._changed.notify_all()

    def custom_ids_received(self) -> dict[str, int]:
        """How many times each ``custom_id`` came in, over every batch created."""
        counts: dict[str, int] = {}
        with self._changed:
            for lines in self._lines.values():
                for line in lines:
                    counts[line.custom_id] = counts.get(line.custom_id, 0) + 1
        return counts

    def _held(self, batch: dict) -> bool:  # holds the lock
        return self._holding or (self._hold_from is not None and batch["_ordinal"] >= self._hold_from)

    def _may_answer(self, batch: dict) -> bool:  # holds the lock
        return not self._held(batch) or sum(
            line.result is not None for line in self._lines[batch["id"]]) < self._held_answers

    def expire(self, batch_id: str) -> None:
        """End ``batch_id`` as its window running out does: lines not answered
        go to the error file as ``batch_expired``; status ``expired``."""
        with self._changed:
            batch = self.batches[batch_id]
            if batch["status"] in TERMINAL:
                raise ValueError(f"batch {batch_id} is already {batch['status']}")
            now = int(time.time())
            for line in self._lines[batch_id]:
                if line.result is None:
                    line.result = {"id": f"batch_req_{uuid.uuid4().hex[:24]}", "custom_id": line.custom_id,
                                   "response": None, "error": {"code": "batch_expired", "message": EXPIRED_MESSAGE}}
            self._finish(batch, "expired", expired_at=now)

    def wait_for(self, batch_id: str, statuses: tuple[str, ...] = TERMINAL, timeout_s: float = 60.0) -> dict:
        """The batch once its status is one of ``statuses`` (bounds a test that would hang)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.batches[batch_id]["status"] in statuses, timeout_s):
                raise AssertionError(f"batch {batch_id} still {self.batches[batch_id]['status']} after {timeout_s:g} s")
            return dict(self.batches[batch_id])

    def stop(self) -> None:
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ---- HTTP ---------------------------------------------------------------

    @staticmethod
    def serves(path: str) -> bool:
        path = path.removeprefix("/v1")
        return path in ("/files", "/batches") or path.startswith(("/files/", "/batches/"))

    def get(self, path: str, query: str) -> tuple[int, dict | bytes]:
        parts = path.removeprefix("/v1").strip("/").split("/")
        with self._changed:
            if parts == ["batches"]:
                return 200, self._list(parse_qs(query))
            if parts[0] == "batches" and len(parts) == 2 and parts[1] in self.batches:
                batch = self.batches[parts[1]]
                if self._hide_from is not None and batch["_ordinal"] >= self._hide_from:
                    return 200, {**_public(batch), "status": "in_progress", "output_file_id": None,
                                 "error_file_id": None}
                return 200, _public(batch)
            if parts[0] == "files" and len(parts) >= 2 and parts[1] in self.files:
                stored = self.files[parts[1]]
                if parts[2:] == ["content"] and self._failing_reads > 0:
                    self._failing_reads -= 1
                    self.file_reads_failed += 1
                    return _error(503, "the service is temporarily unavailable")
                if parts[2:] == ["content"]:
                    return 200, stored.data
                if len(parts) == 2:
                    return 200, stored.as_object()
        return _error(404, f"no such object: {path}")

    def post(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict]:
        parts = path.removeprefix("/v1").strip("/").split("/")
        if parts == ["files"]:
            return self._upload(headers.get("Content-Type") or headers.get("content-type") or "", body)
        if parts == ["batches"]:
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                return _error(400, "invalid JSON body")
            return self._create(request)
        if len(parts) == 3 and parts[0] == "batches" and parts[2] == "cancel":
            return self._cancel(parts[1])
        return _error(404, f"no route {path}")

    def _upload(self, content_type: str, body: bytes) -> tuple[int, dict]:
        fields = _multipart(content_type, body)
        if "file" not in fields:
            return _error(400, "missing file", "missing_file")
        purpose = fields.get("purpose", (None, b""))[1].decode()
        if purpose != "batch":
            return _error(400, f"purpose must be 'batch', not {purpose!r}", "invalid_purpose")
        stored = self._store(fields["file"][0] or "upload.jsonl", "batch", fields["file"][1])
        with self._changed:
            self.files_uploaded += 1
        return 200, stored.as_object()

    def _store(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        stored = StoredFile(f"file-{uuid.uuid4().hex[:24]}", filename, purpose, data, int(time.time()))
        with self._changed:
            self.files[stored.id] = stored
        return stored

    def _create(self, request: dict) -> tuple[int, dict]:
        input_id = request.get("input_file_id")
        if request.get("endpoint") != CHAT_ENDPOINT:
            return _error(400, f"endpoint must be {CHAT_ENDPOINT}", "invalid_endpoint")
        if request.get("completion_window") != "24h":
            return _error(400, "completion_window must be '24h'", "invalid_completion_window")
        with self._changed:
            if input_id not in self.files:
                return _error(404, f"no file {input_id}", "file_not_found")
            lines, errors = _parse_lines(self.files[input_id].data)
            now = int(time.time())
            batch = {
                "id": f"batch_{uuid.uuid4().hex[:24]}", "object": "batch", "endpoint": CHAT_ENDPOINT,
                "errors": None, "input_file_id": input_id, "completion_window": "24h", "status": "validating",
                "output_file_id": None, "error_file_id": None, "created_at": now, "in_progress_at": None,
                "expires_at": now + WINDOW_S, "finalizing_at": None, "completed_at": None, "failed_at": None,
                "expired_at": None, "cancelling_at": None, "cancelled_at": None,
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                "metadata": request.get("metadata") or {},
                "_errors": errors, "_due": time.monotonic() + self.turnaround_s,
                "_ordinal": self.batches_created + 1,
            }
            self.batches[batch["id"]] = batch
            self._lines[batch["id"]] = lines
            self.batches_created += 1
            self.lines_received[batch["id"]] = len(lines)
            self._start_worker()
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._mute_from is None or batch["_ordinal"] < self._mute_from
                                   or self.judge._stopping.is_set())
            return 200, _public(batch)

    def _cancel(self, batch_id: str) -> tuple[int, dict]:
        with self._changed:
            batch = self.batches.get(batch_id)
            if batch is None:
                return _error(404, f"no batch {batch_id}")
            if batch["status"] in TERMINAL:
                return _error(409, f"cannot cancel a batch that is {batch['status']}", "batch_not_cancellable")
            if batch["status"] != "cancelling":
                batch.update(status="cancelling", cancelling_at=int(time.time()))
            self._changed.notify_all()
            return 200, _public(batch)

    def _list(self, query: dict[str, list[str]]) -> dict:
        limit = int((query.get("limit") or ["20"])[0])
        after = (query.get("after") or [None])[0]
        ordered = sorted(self.batches.values(), key=lambda b: (b["created_at"], b["id"]), reverse=True)
        if after is not None:
            ids = [b["id"] for b in ordered]
            ordered = ordered[ids.index(after) + 1:] if after in ids else []
        page = [_public(b) for b in ordered[:limit]]
        return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": len(ordered) > limit}

    # ---- the worker -----------------------------------------------------------

    def _start_worker(self) -> None:  # holds the lock
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="batch-api", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while not self.judge._stopping.is_set():
            with self._changed:
                batch = self._next_due()
                if batch is None:
                    self._changed.wait(0.02)
                    continue
            self._run(batch)

    def _next_due(self) -> dict | None:  # holds the lock
        now = time.monotonic()
        for batch in self.batches.values():
            if batch["status"] == "validating":
                if batch["_errors"]:
                    batch["errors"] = {"object": "list", "data": batch["_errors"]}
                    self._finish(batch, "failed", failed_at=int(time.time()))
                    continue
                batch.update(status="in_progress", in_progress_at=int(time.time()))
                self._changed.notify_all()
            if batch["status"] == "cancelling":
                self._finish(batch, "cancelled", cancelled_at=int(time.time()))
                continue
            if batch["status"] == "in_progress" and self._may_answer(batch) and now >= batch["_due"]:
                return batch
        return None

    def _run(self, batch: dict) -> None:
        """Answer the batch's lines one by one; a cancel or an expiry in between
        stops it (the rest are not answered)."""
        for line in self._lines[batch["id"]]:
            with self._changed:
                if batch["status"] != "in_progress" or not self._may_answer(batch) or self.judge._stopping.is_set():
                    return
                if line.result is not None:
                    continue
            status, body = self.judge.answer(line.body, discount=self.batch_discount)
            with self._changed:
                if line.result is not None:
                    return  # the batch expired meanwhile: this line went to the error file
                line.ok = status == 200
                line.result = {"id": f"batch_req_{uuid.uuid4().hex[:24]}", "custom_id": line.custom_id,
                               "response": {"status_code": status, "request_id": uuid.uuid4().hex, "body": body},
                               "error": None}
                counts = batch["request_counts"]
                counts["completed" if line.ok else "failed"] += 1
                self._changed.notify_all()
        with self._changed:
            if batch["status"] == "in_progress":
                batch.update(status="finalizing", finalizing_at=int(time.time()))
                self._finish(batch, "completed", completed_at=int(time.time()))

    def _finish(self, batch: dict, status: str, **stamps: int) -> None:  # holds the lock
        """Write the output and error files of the lines answered, then end the batch."""
        lines = self._lines[batch["id"]]
        done = [line.result for line in lines if line.result is not None and line.ok]
        failed = [line.result for line in lines if line.result is not None and not line.ok]
        batch["request_counts"] = {"total": len(lines), "completed": len(done), "failed": len(failed)}
        for key, results, name in (("output_file_id", done, "output"), ("error_file_id", failed, "errors")):
            if results:
                data = "".join(json.dumps(r) + "\n" for r in results).encode()
                batch[key] = self._store(f"{batch['id']}_{name}.jsonl", "batch_output", data).id
        batch.update(status=status, **stamps)
        self._changed.notify_all()


def _public(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if not k.startswith("_")}
