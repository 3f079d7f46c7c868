"""A local OpenAI-compatible judge server for tests and the benchmark.

Serves ``POST /v1/chat/completions`` (and ``/chat/completions``) on
127.0.0.1 from a background thread, so the real litellm adapter can be driven
over real HTTP without an API key::

    with JudgeServer() as server:                       # rule_responder by default
        judge = LiteLLMJudge("openai/judge-test", api_base=server.url, api_key="k")
        ...
        assert server.calls("Opinions") == 1

What a request gets, in this order:

1. the next reply queued with :meth:`JudgeServer.script`, if any;
2. otherwise a fault drawn from ``fault_rates`` (seeded, one draw per request):
   ``"429"`` (with ``Retry-After: fault_retry_after``), ``"500"``,
   ``"garbage"`` (200 with non-JSON content), ``"stall"`` (answers only after
   ``stall_s``; the client normally times out first);
3. otherwise ``responder(request)`` (:func:`rule_responder` by default).

Every request also waits ``latency_mean_s +- latency_jitter_s`` (uniform,
seeded) plus the reply's own ``delay_s``.

Tests that need an order of events rather than a duration (a call holds a slot
while others queue, N requests are in flight at once) hold replies instead:
after :meth:`JudgeServer.hold`, every request is received and counted in flight
but answered only once :meth:`JudgeServer.release` lets it go (oldest first);
:meth:`JudgeServer.wait_until` waits for a state of the counters (``held``,
``in_flight``, ``calls()``) without a fixed sleep.

Also runs as a process (the benchmark uses this)::

    python -m tests.support.judge_server --port 0 --latency-mean 0.2 --fault 429=0.05

which prints its base URL (``http://127.0.0.1:<port>/v1``) as the first stdout
line and serves until SIGINT/SIGTERM. ``--reply-form FORM`` (or
``JudgeServer(reply_form_responder(FORM))``) writes every answer in one of the
forms real models use (:mod:`tests.support.reply_forms`). ``GET /stats`` returns the counters as
JSON and ``POST /reset`` clears them.

It also serves OpenAI's Files and Batches API (:mod:`tests.support.batch_api`,
``server.batch_api``): each batch line is answered by the same script, faults and
responder, ``batch_turnaround_s`` after the batch was created, and billed at
``batch_discount`` of ``prices_per_mtok`` (``billed_usd``, and ``billed_batch_usd``
for batches alone); ``--batch-turnaround`` and ``--batch-discount`` as a process.

An account limit, as a provider enforces it (:mod:`tests.support.provider_limit`):
``rpm_limit`` and ``tpm_limit`` (``--rpm-limit``, ``--tpm-limit``) answer 429 with a
``Retry-After`` past so many requests or tokens in 60 s; ``stats()["account"]``
counts the requests accepted per minute and refused, and ``server.account.refuse_for(s)``
plays another client on the same key using it up.

Prompt caching, as a provider with a prefix cache reports it: a prompt of
``cache_min_tokens`` or more whose prefix a prompt seen within ``cache_window_s``
shared gets ``usage.prompt_tokens_details.cached_tokens`` (the shared prefix, from
``cache_min_tokens`` up in ``cache_block_tokens`` blocks; OpenAI: 1,024 and 128),
billed at ``cached_fraction`` of the input price. Prompt tokens are estimated as
``len(text) // 4 + 1`` of the messages' text, a token as four characters.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from judgeflow.metrics.data_block import BEGIN, parse_data_block
from tests.support.batch_api import BatchAPI
from tests.support.provider_limit import ProviderLimit

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
GARBAGE = "Sure! Here's my analysis of the text: it looks mostly fine to me, overall a 7/10."
FAULT_KINDS = ("429", "500", "garbage", "stall")


@dataclass
class Reply:
    """What the server sends for one request."""

    content: str | None = None  # assistant message content (200 OK)
    status: int = 200
    body: dict | str | None = None  # raw body override (errors, or a malformed 200)
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"Retry-After": "1"}
    delay_s: float = 0.0  # sleep before answering (stall / latency)


@dataclass
class ChatRequest:
    """What the server received."""

    model: str
    messages: list[dict]
    step: str | None  # response_format.json_schema.name, e.g. "Opinions"
    data: dict | None  # parse_data_block() of the last user message; None if no block
    raw: dict
    headers: dict[str, str] = field(default_factory=dict)
    received_at: float = 0.0  # time.monotonic()


def json_reply(obj: Any, **kwargs) -> Reply:
    return Reply(content=json.dumps(obj), **kwargs)


def error_reply(
    status: int,
    message: str,
    *,
    type: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    delay_s: float = 0.0,
) -> Reply:
    """An OpenAI-style error body ``{"error": {"message", "type", "code"}}``."""
    default_type = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "server_error")
    body = {"error": {"message": message, "type": type or default_type, "param": None, "code": code}}
    return Reply(status=status, body=body, headers=dict(headers or {}), delay_s=delay_s)


def context_window_reply() -> Reply:
    """The 400 OpenAI sends when the prompt is too long."""
    return error_reply(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 200000 tokens. Please reduce the length of the messages.",
        type="invalid_request_error",
        code="context_length_exceeded",
    )


def garbage_reply() -> Reply:
    return Reply(content=GARBAGE)


# --------------------------------------------------------------------------
# the default, rule-based judge
# --------------------------------------------------------------------------

# sentence ends are [.!?] followed by whitespace or the end, so "0.25" stays whole
_SENTENCE = re.compile(r"[.!?](?=\s|$)")
_HALLUC = re.compile(r"\[halluc=([0-9]*\.?[0-9]+)\]")
_GEVAL = re.compile(r"\[geval=([0-9]+)\]")
_CRITERIA = re.compile(r"Evaluation criteria:\n(.*?)\n\n", re.DOTALL)
_FORCED = re.compile(r"\[judge-fail:(500|429|garbage|400)\]", re.IGNORECASE)


def _output_text(data: dict) -> str:
    """The reply text a rule reads: ``output``, or a session metric's conversation's outputs, in order."""
    turns = data.get("conversation")
    if isinstance(turns, list):
        return " ".join(str(t.get("output") or "") for t in turns if isinstance(t, dict))
    return str(data.get("output") or "")


def _forced_failure(data: dict) -> Reply | None:
    parts = [_output_text(data)]
    opinions = data.get("opinions")
    if isinstance(opinions, list):
        parts.extend(str(o) for o in opinions)
    match = _FORCED.search(" ".join(parts))
    if not match:
        return None
    kind = match.group(1).lower()
    if kind == "500":
        return error_reply(500, "forced failure [judge-fail:500]")
    if kind == "429":
        return error_reply(429, "forced rate limit [judge-fail:429]", headers={"Retry-After": "0"})
    if kind == "400":
        return error_reply(400, "forced bad request [judge-fail:400]")
    return garbage_reply()


_UNSTORABLE = "[judge-unstorable]"
UNSTORABLE_SUFFIX = " \x00nul \ud800lone \udc80lone"


def _with_unstorable(value: Any) -> Any:
    """Every string of a reply given a NUL and lone surrogates (as JSON escapes)."""
    if isinstance(value, str):
        return value + UNSTORABLE_SUFFIX
    if isinstance(value, list):
        return [_with_unstorable(v) for v in value]
    if isinstance(value, dict):
        return {k: (v if k == "verdict" else _with_unstorable(v)) for k, v in value.items()}
    return value


def rule_responder(req: ChatRequest) -> Reply:
    """:func:`scripted_responder`, plus: ``[judge-unstorable]`` in ``output``
    (or an opinion) appends a NUL and lone surrogates to every string of the
    reply, as a misbehaving judge (or model) might."""
    reply = scripted_responder(req)
    data = req.data or {}
    parts = [str(data.get("output") or "")] + [str(o) for o in data.get("opinions") or []]
    if reply.status == 200 and reply.content and _UNSTORABLE in " ".join(parts):
        return replace(reply, content=json.dumps(_with_unstorable(json.loads(reply.content))))
    return reply


def geval_steps(req: ChatRequest) -> list[str]:
    """Steps naming the criteria they were written from: other criteria, other steps."""
    text = " ".join(_text_of(m.get("content")) for m in req.messages if isinstance(m, dict))
    match = _CRITERIA.search(text)
    criteria = match.group(1).strip() if match else "?"
    return ["Read what the user sent.", f"Check the reply against the criteria: {criteria}"]


def scripted_responder(req: ChatRequest) -> Reply:
    """A deterministic judge scripted by the content of the data block.

    * ``Opinions``: sentences of ``output`` (split on ``.!?``) not starting with "Fact:".
    * ``Verdicts``: "yes" for opinions containing ``[toxic]`` (any case), else "no".
    * ``ToxicityReason``: "The score is <score> because ...".
    * ``HallucinationJudgement``: score from a ``[halluc=0.75]`` marker in ``output``, else 0.0.
    * ``GEvalScore`` (a file metric): the score of a ``[geval=N]`` marker in ``output`` (11 and up: an invalid
      reply), else 10 (a session metric: the last marker in its turns' outputs, its reason "Saw N turns."); ``GEvalSteps``: two steps, the second quoting the criteria (a 400 for criteria
      holding ``[steps-fail]``).
    * ``RudenessJudgement`` (a test's own metric): 1.0 for ``[rude]`` in ``output``, else 0.0.
    * ``[judge-fail:500|429|garbage|400]`` in ``output`` (or in an opinion) always fails that way.
    """
    if req.step == "GEvalSteps":  # a G-Eval metric's steps, written from its criteria (no trace data)
        steps = geval_steps(req)
        if "[steps-fail]" in steps[-1]:
            return error_reply(400, "forced bad request [steps-fail]")
        return json_reply({"steps": steps})
    data = req.data
    if data is None:
        return error_reply(400, f"rule_responder: no data block ({BEGIN}) in the last user message")
    forced = _forced_failure(data)
    if forced is not None:
        return forced

    if req.step == "Opinions":
        sentences = [s.strip() for s in _SENTENCE.split(str(data.get("output") or ""))]
        opinions = [s for s in sentences if s and not s.startswith("Fact:")]
        return json_reply({"opinions": opinions})

    if req.step == "Verdicts":
        verdicts = []
        for opinion in data.get("opinions") or []:
            if "[toxic]" in str(opinion).lower():
                verdicts.append({"verdict": "yes", "reason": "The opinion is marked [toxic]."})
            else:
                verdicts.append({"verdict": "no", "reason": "The opinion is not toxic."})
        return json_reply({"verdicts": verdicts})

    if req.step == "ToxicityReason":
        score = data.get("score")
        n_toxic = len(data.get("toxic_opinions") or data.get("toxic_reasons") or [])
        return json_reply(
            {"reason": f"The score is {score} because {n_toxic} of the opinions were judged toxic."}
        )

    if req.step == "HallucinationJudgement":
        match = _HALLUC.search(str(data.get("output") or ""))
        score = float(match.group(1)) if match else 0.0
        reasons = (
            [f"The output carries the marker [halluc={match.group(1)}]."]
            if match
            else ["The output agrees with the context."]
        )
        return json_reply({"score": score, "reason": reasons})

    if req.step == "GEvalScore" and isinstance(data.get("conversation"), list):
        # a session metric: the last [geval=N] marker of the turns' outputs, else 10; the reason says how
        # many turns (elision markers included) it was shown
        turns = data["conversation"]
        marks = _GEVAL.findall(_output_text(data))
        return json_reply({"score": int(marks[-1]) if marks else 10, "reason": f"Saw {len(turns)} turns."})

    if req.step == "GEvalScore":  # a file metric (metrics/geval/): 0-10 from a [geval=N] marker, else 10
        match = _GEVAL.search(str(data.get("output") or ""))
        if match is None:
            return json_reply({"score": 10, "reason": "The reply does what the criteria ask."})
        return json_reply({"score": int(match.group(1)), "reason": f"The reply carries the marker [geval={match.group(1)}]."})

    if req.step == "RudenessJudgement":  # tests/flows/test_metric_registry.py's own metric
        rude = "[rude]" in str(data.get("output") or "").lower()
        return json_reply({"score": 1.0 if rude else 0.0, "reason": "marked [rude]" if rude else "polite"})

    return error_reply(400, f"rule_responder: unknown step {req.step!r}")


def reply_form_responder(form: str, base: Callable[[ChatRequest], Reply] | None = None) -> Callable[[ChatRequest], Reply]:
    """``base``'s (:func:`rule_responder` by default) successful replies
    rewritten in ``form``, a key of :data:`tests.support.reply_forms.LAX_FORMS`
    (prose around the JSON, two fences, trailing commas, extra keys, ...), as
    real models write them; errors pass through unchanged."""
    from tests.support.reply_forms import LAX_FORMS

    rewrite = LAX_FORMS[form]
    base = base or rule_responder

    def responder(req: ChatRequest) -> Reply:
        reply = base(req)
        if reply.status != 200 or reply.body is not None or not reply.content:
            return reply
        return replace(reply, content=rewrite(reply.content))

    return responder


# --------------------------------------------------------------------------
# scripted judges that flag a chosen fraction of opinions (judge epochs, shadow)
# --------------------------------------------------------------------------


def flag_draw(text: str) -> float:
    """A fixed number in [0, 1) per text (sha256): a fraction judge flags ``text``
    when it is below the judge's fraction, so a text flagged at 5% is also
    flagged at 12%, and a test can tell which texts any judge flags."""
    return int.from_bytes(hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2**64


def flagged(text: str, fraction: float) -> bool:
    return flag_draw(text) < fraction


def fraction_responder(fractions: dict[str, float], base: Callable[[ChatRequest], Reply] | None = None
                       ) -> Callable[[ChatRequest], Reply]:
    """Judges named in ``fractions`` (the model as the request names it:
    ``judge-a`` for litellm's ``openai/judge-a``) answer ``Verdicts`` with "yes"
    for an opinion :func:`flagged` at their fraction, or marked ``[toxic]`` or
    ``[toxic:<model>]``; everything else as ``base`` (:func:`rule_responder`)."""
    base = base or rule_responder

    def respond(req: ChatRequest) -> Reply:
        fraction = fractions.get(req.model)
        if fraction is None or req.step != "Verdicts" or req.data is None or _forced_failure(req.data):
            return base(req)
        verdicts = []
        for opinion in req.data.get("opinions") or []:
            text = str(opinion)
            if flagged(text, fraction) or "[toxic]" in text.lower() or f"[toxic:{req.model}]" in text.lower():
                verdicts.append({"verdict": "yes", "reason": f"{req.model} flags this opinion."})
            else:
                verdicts.append({"verdict": "no", "reason": f"{req.model} finds this opinion fine."})
        return json_reply({"verdicts": verdicts})

    return respond


# --------------------------------------------------------------------------
# request parsing and response building
# --------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _parse_request(raw: dict, headers: dict[str, str]) -> ChatRequest:
    messages = raw.get("messages") or []
    step = None
    response_format = raw.get("response_format")
    if isinstance(response_format, dict):
        schema = response_format.get("json_schema")
        if isinstance(schema, dict):
            step = schema.get("name")
    data = None
    # the last user message that holds a data block: on a repair re-ask the
    # last user message is the repair instruction, the data sits earlier
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _text_of(message.get("content"))
            if BEGIN not in text:
                continue
            try:
                parsed = parse_data_block(text)
            except (ValueError, json.JSONDecodeError):
                parsed = None
            data = parsed if isinstance(parsed, dict) else None
            break
    return ChatRequest(
        model=str(raw.get("model", "")),
        messages=messages,
        step=step,
        data=data,
        raw=raw,
        headers=headers,
        received_at=time.monotonic(),
    )


def estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


def completion_body(req: ChatRequest, content: str | None) -> dict:
    prompt_text = "".join(_text_of(m.get("content")) for m in req.messages if isinstance(m, dict))
    prompt_tokens = estimate_tokens(prompt_text)
    completion_tokens = estimate_tokens(content or "")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model or "judge-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_body(completion: dict) -> bytes:
    """A chat completion as the server-sent events of a streamed reply (``stream: true``):
    one chunk per word of the content, then the finish reason and usage, then [DONE]."""
    choice = (completion.get("choices") or [{}])[0]
    content = (choice.get("message") or {}).get("content") or ""
    base = {"id": completion.get("id"), "object": "chat.completion.chunk", "created": completion.get("created"),
            "model": completion.get("model")}
    words = re.findall(r"\S+\s*", content) or [""]
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": w} if i == 0
                                    else {"content": w}, "finish_reason": None}]} for i, w in enumerate(words)]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}],
                   "usage": completion.get("usage")})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


# --------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, *args, **kwargs):
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Drop open keep-alive connections so their handler threads end."""
        with self._conns_lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real API
    # http.server sends a reply's headers and body in two send() calls; with
    # Nagle on, the body waits for the client's delayed ACK (~40 ms per call).
    disable_nagle_algorithm = True
    judge: "JudgeServer"  # set on the per-server subclass

    def log_message(self, format, *args):  # noqa: A002 - silence the access log
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, ctype="application/json"):
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError):
            self.close_connection = True  # the client gave up (e.g. timed out on a stall)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):  # noqa: N802
        path, _, query = self.path.partition("?")
        if BatchAPI.serves(path):
            status, payload = self.judge.batch_api.get(path, query)
            if isinstance(payload, bytes):
                self._send(status, payload, ctype="application/octet-stream")
            else:
                self._send(status, json.dumps(payload).encode())
        elif path == "/stats":
            self._send(200, json.dumps(self.judge.stats()).encode())
        elif path in ("/health", "/v1/models", "/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "judge-test", "object": "model"}]}).encode())
        else:
            self._send(404, json.dumps({"error": {"message": "not found", "type": "invalid_request_error", "code": None}}).encode())

    def do_POST(self):  # noqa: N802
        path = self.path.split("?", 1)[0]
        body = self._read_body()
        if path == "/reset":
            self.judge.reset()
            self._send(200, b"{}")
            return
        if BatchAPI.serves(path):
            status, payload = self.judge.batch_api.post(path, {k: v for k, v in self.headers.items()}, body)
            self._send(status, json.dumps(payload).encode())
            return
        if path not in CHAT_PATHS:
            self._send(404, json.dumps({"error": {"message": f"no route {path}", "type": "invalid_request_error", "code": None}}).encode())
            return
        try:
            raw = json.loads(body or b"{}")
            if not isinstance(raw, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            self._send(400, json.dumps({"error": {"message": f"invalid JSON body: {exc}", "type": "invalid_request_error", "code": None}}).encode())
            return
        status, payload, headers = self.judge._handle(raw, {k: v for k, v in self.headers.items()})
        if raw.get("stream") and status == 200:
            payload = stream_body(json.loads(payload))
            self._send(status, payload, headers, ctype="text/event-stream")
            return
        self._send(status, payload, headers)


class JudgeServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 (see module doc)."""

    def __init__(
        self,
        responder: Callable[[ChatRequest], Reply] | None = None,
        *,
        latency_mean_s: float = 0.0,
        latency_jitter_s: float = 0.0,
        fault_rates: dict[str, float] | None = None,
        seed: int = 0,
        stall_s: float = 30.0,
        fault_retry_after: str = "0",
        host: str = "127.0.0.1",
        port: int = 0,
        prices_per_mtok: tuple[float, float] = (0.0, 0.0),
        batch_turnaround_s: float = 0.05,
        batch_discount: float = 0.5,
        cached_fraction: float = 0.5,
        cache_min_tokens: int = 1024,
        cache_block_tokens: int = 128,
        cache_window_s: float = 600.0,
        rpm_limit: int | None = None,
        tpm_limit: int | None = None,
    ):
        unknown = set(fault_rates or {}) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; expected {FAULT_KINDS}")
        if sum((fault_rates or {}).values()) > 1.0:
            raise ValueError("fault rates sum to more than 1")
        self.responder: Callable[[ChatRequest], Reply] = responder or rule_responder
        self.latency_mean_s = latency_mean_s
        self.latency_jitter_s = latency_jitter_s
        self.fault_rates: dict[str, float] = dict(fault_rates or {})
        self.stall_s = stall_s
        self.fault_retry_after = fault_retry_after
        # USD per million (prompt, completion) tokens this server bills
        self.prices_per_mtok = prices_per_mtok
        # the tokens it counts are this times ~4 characters a token: a model whose tokenizer differs
        self.token_scale = 1.0
        self.cached_fraction = cached_fraction  # of the input price, for cached prompt tokens
        self.cache_min_tokens = cache_min_tokens
        self.cache_block_tokens = cache_block_tokens
        self.cache_window_s = cache_window_s
        self._seed = seed
        self._rng = random.Random(seed)
        self._host = host
        self._port = port
        self._lock = threading.RLock()  # re-entered by wait_until's predicate reading the counters
        self._changed = threading.Condition(self._lock)  # notified whenever a counter or a hold changes
        self._holding = False
        self._held: list[int] = []  # id() of each request held, oldest first
        self._let_go: set[int] = set()  # held requests released, not yet answered
        self._stopping = threading.Event()
        self._script: list[Reply] = []
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url: str = ""
        self.batch_api = BatchAPI(self, turnaround_s=batch_turnaround_s, batch_discount=batch_discount)
        # the account's limit, as a provider enforces it (tests/support/provider_limit.py)
        self.account = ProviderLimit(rpm_limit, tpm_limit)
        self._reset_counters()

    # ---- lifecycle --------------------------------------------------------

    def start(self) -> "JudgeServer":
        if self._server is not None:
            return self
        handler = type("JudgeHandler", (_Handler,), {"judge": self})
        self._stopping.clear()
        self._server = _HTTPServer((self._host, self._port), handler)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="judge-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes stalled handlers
        with self._changed:
            self._changed.notify_all()  # and held ones
        self.batch_api.stop()
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "JudgeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0]) if self.url else 0

    # ---- holding replies ----------------------------------------------------

    def hold(self) -> None:
        """From now on, answer no request until :meth:`release` lets it go
        (it is received, counted and in flight meanwhile)."""
        with self._changed:
            self._holding = True

    def release(self, count: int | None = None) -> None:
        """Let the ``count`` oldest held requests answer; None: every one held,
        and stop holding."""
        with self._changed:
            waiting = [key for key in self._held if key not in self._let_go]
            if count is None:
                self._holding = False
                count = len(waiting)
            self._let_go.update(waiting[:count])
            self._changed.notify_all()

    @property
    def held(self) -> int:
        """Requests received and held, not yet released."""
        with self._lock:
            return sum(1 for key in self._held if key not in self._let_go)

    def wait_until(self, predicate: Callable[["JudgeServer"], bool], what: str, timeout_s: float = 120.0) -> None:
        """Block until ``predicate(self)`` holds (checked at every change of the
        counters); fail naming ``what`` after ``timeout_s``, which only bounds a test
        that would otherwise hang."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self), timeout_s):
                raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}: {self.stats()}")

    def _wait_for_release(self, req: ChatRequest) -> None:
        with self._changed:
            if not self._holding:
                return
            key = id(req)
            self._held.append(key)
            self._changed.notify_all()
            self._changed.wait_for(lambda: key in self._let_go or self._stopping.is_set())
            self._held.remove(key)
            self._let_go.discard(key)
            self._changed.notify_all()

    # ---- batches (tests.support.batch_api) -----------------------------------

    def hold_batches(self) -> None:
        self.batch_api.hold()

    def release_batches(self) -> None:
        self.batch_api.release()

    def expire_batch(self, batch_id: str) -> None:
        self.batch_api.expire(batch_id)

    @property
    def batches_created(self) -> int:
        return self.batch_api.batches_created

    @property
    def files_uploaded(self) -> int:
        return self.batch_api.files_uploaded

    def lines_received(self, batch_id: str) -> int:
        return self.batch_api.lines_received.get(batch_id, 0)

    # ---- scripting and inspection ----------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies served first, in order, before faults and the responder."""
        with self._lock:
            self._script.extend(replies)

    def calls(self, step: str | None = None) -> int:
        with self._lock:
            if step is None:
                return len(self.requests)
            return sum(1 for r in self.requests if r.step == step)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    @property
    def mean_in_flight(self) -> float:
        """Time-weighted mean of requests in flight, from the first request
        (since start/reset) to the last time the count changed."""
        with self._lock:
            if self._first_request is None:
                return 0.0
            # read without moving the count's last change: idle time after the last reply is not counted
            now = time.monotonic()
            area = self._area + self._in_flight * (now - self._last_change)
            span = (now if self._in_flight else self._last_change) - self._first_request
            return area / span if span > 0 else 0.0

    def stats(self) -> dict[str, Any]:
        with self._lock:
            by_step: dict[str, int] = {}
            for r in self.requests:
                by_step[str(r.step)] = by_step.get(str(r.step), 0) + 1
            statuses = dict(self._statuses)
            faults = dict(self._faults)
            total, in_flight, max_in_flight = len(self.requests), self._in_flight, self._max_in_flight
        return {
            "requests": total,
            "by_step": by_step,
            "statuses": statuses,
            "faults": faults,
            "in_flight": in_flight,
            "max_in_flight": max_in_flight,
            "mean_in_flight": self.mean_in_flight,
            "billed_usd": self.billed_usd,
            "billed_batch_usd": self.billed_batch_usd,
            "billed_requests": self.billed_requests,
            "cached_tokens": self.cached_tokens,
            "account": self.account.stats(),
            **self.batch_api.stats(),
        }

    @property
    def billed_usd(self) -> float:
        """What the requests received so far were billed (see :meth:`_bill`)."""
        with self._lock:
            return self._billed_usd

    @property
    def billed_batch_usd(self) -> float:
        """The part of :attr:`billed_usd` billed for batch lines."""
        with self._lock:
            return self._billed_batch_usd

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens reported cached so far."""
        with self._lock:
            return self._cached_tokens

    @property
    def billed_requests(self) -> int:
        with self._lock:
            return self._billed_requests

    def bill_of(self, req: ChatRequest) -> float:
        """What ``req`` was billed (0 when it was not)."""
        with self._lock:
            return self._bills.get(id(req), 0.0)

    def _bill(self, req: ChatRequest, completion: dict, discount: float | None = None) -> None:
        """Bill a request as a provider does: every request answered with a
        completion is billed its usage when the answer is generated, whether
        or not the client is still waiting for it (a stalled one included);
        cached prompt tokens at ``cached_fraction`` of the input price, a batch
        line (``discount`` given) at ``discount`` of the whole."""
        usage = completion["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        cost = (1.0 if discount is None else discount) * ((usage["prompt_tokens"] - cached + cached * self.cached_fraction) * self.prices_per_mtok[0]
                           + usage["completion_tokens"] * self.prices_per_mtok[1]) / 1_000_000
        with self._lock:
            self._bills[id(req)] = cost
            self._billed_usd += cost
            if discount is not None:
                self._billed_batch_usd += cost
            self._billed_requests += 1

    def _completion(self, req: ChatRequest, content: str | None) -> dict:
        """The completion answering ``req``, its usage with the prompt tokens cached."""
        completion = completion_body(req, content)
        usage = completion["usage"]
        if self.token_scale != 1.0:  # a tokenizer that counts fewer (or more) tokens than ~4 characters each
            usage["prompt_tokens"] = max(1, round(usage["prompt_tokens"] * self.token_scale))
            usage["completion_tokens"] = max(1, round(usage["completion_tokens"] * self.token_scale))
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        prompt = "".join(_text_of(m.get("content")) for m in req.messages if isinstance(m, dict))
        cached = self._cache(prompt, completion["usage"]["prompt_tokens"])
        completion["usage"]["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        return completion

    def _cache(self, prompt: str, prompt_tokens: int) -> int:
        """Cached tokens of ``prompt``: its longest prefix, in blocks from the
        minimum up, that a prompt seen within the window also began with; the
        prompt's own prefixes are remembered for the next."""
        if prompt_tokens < self.cache_min_tokens:
            return 0
        sizes = range(self.cache_min_tokens, prompt_tokens + 1, self.cache_block_tokens)
        keys = [hashlib.sha256(prompt[: 4 * size].encode("utf-8", "surrogatepass")).digest() for size in sizes]
        now = time.monotonic()
        with self._lock:
            seen = self._prefixes
            cached = max((size for size, key in zip(sizes, keys) if now - seen.get(key, -1e18) <= self.cache_window_s),
                         default=0)
            for key in keys:
                seen[key] = now
            self._cached_tokens += cached
        return cached

    def answer(self, raw: dict, *, discount: float) -> tuple[int, dict | str]:
        """A batch line's answer (status, body), chosen as a chat request's
        (script, faults, responder) and counted and billed the same, at
        ``discount``; no latency and no hold."""
        req = _parse_request(raw, {})
        self._enter(req)
        status = 500
        try:
            reply, _ = self._choose(req)
            status = reply.status
            if reply.status == 200 and reply.body is None:
                completion = self._completion(req, reply.content)
                self._bill(req, completion, discount)
                return 200, completion
            if reply.body is not None:
                return reply.status, reply.body
            return reply.status, error_reply(reply.status, "error").body
        finally:
            self._leave(status)

    def reset(self) -> None:
        """Forget requests, counters and the script; re-seed the fault/latency draws."""
        with self._lock:
            self._script.clear()
            self._rng = random.Random(self._seed)
            in_flight = getattr(self, "_in_flight", 0)
            self._reset_counters()
            self.batch_api.reset_counters()
            self.account.reset()
            self._in_flight = in_flight  # requests still being served keep counting down

    def _reset_counters(self) -> None:
        self.requests: list[ChatRequest] = []
        self._billed_usd = 0.0
        self._billed_batch_usd = 0.0
        self._cached_tokens = 0
        self._prefixes: dict[bytes, float] = {}  # sha256 of a prompt prefix -> when a prompt last began with it
        self._billed_requests = 0
        self._bills: dict[int, float] = {}  # id(request) -> what it was billed
        self._statuses: dict[str, int] = {}
        self._faults: dict[str, int] = {}
        self._in_flight = 0
        self._max_in_flight = 0
        self._area = 0.0
        self._first_request: float | None = None
        self._last_change = time.monotonic()

    # ---- request handling --------------------------------------------------

    def _advance_area(self, now: float) -> None:  # holds self._lock
        if self._first_request is not None:
            self._area += self._in_flight * (now - self._last_change)
        self._last_change = now

    def _enter(self, req: ChatRequest) -> None:
        with self._lock:
            now = time.monotonic()
            if self._first_request is None:
                self._first_request = now
                self._last_change = now
            self._advance_area(now)
            self.requests.append(req)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            self._changed.notify_all()

    def _leave(self, status: int) -> None:
        with self._lock:
            self._advance_area(time.monotonic())
            self._in_flight = max(0, self._in_flight - 1)
            self._statuses[str(status)] = self._statuses.get(str(status), 0) + 1
            self._changed.notify_all()

    def _choose(self, req: ChatRequest) -> tuple[Reply, float]:
        """The reply for ``req`` and the latency to add: script, then faults, then responder."""
        with self._lock:
            jitter = self._rng.uniform(-self.latency_jitter_s, self.latency_jitter_s) if self.latency_jitter_s else 0.0
            latency = max(0.0, self.latency_mean_s + jitter)
            if self._script:
                return self._script.pop(0), latency
            fault = None
            if self.fault_rates:
                draw, acc = self._rng.random(), 0.0
                for kind in FAULT_KINDS:
                    acc += self.fault_rates.get(kind, 0.0)
                    if draw < acc:
                        fault = kind
                        break
            if fault is not None:
                self._faults[fault] = self._faults.get(fault, 0) + 1
        if fault == "429":
            return error_reply(429, "Rate limit reached (injected fault)", headers={"Retry-After": self.fault_retry_after}), latency
        if fault == "500":
            return error_reply(500, "The server had an error while processing your request (injected fault)"), latency
        if fault == "garbage":
            return garbage_reply(), latency
        try:
            reply = self.responder(req)
        except Exception as exc:  # a broken responder is a 500 the test can see
            reply = error_reply(500, f"responder raised {type(exc).__name__}: {exc}")
        if fault == "stall":  # the real answer, but only after stall_s
            reply = replace(reply, delay_s=reply.delay_s + self.stall_s)
        return reply, latency

    def _handle(self, raw: dict, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        req = _parse_request(raw, headers)
        self._enter(req)
        status = 500
        try:
            retry_after, ticket = self.account.admit()
            if retry_after is not None:
                status = 429
                reply = error_reply(429, "Rate limit reached for requests (account limit)",
                                    headers={"Retry-After": f"{retry_after:.3f}"})
                return 429, json.dumps(reply.body).encode(), dict(reply.headers)
            reply, latency = self._choose(req)
            status = reply.status
            completion = self._completion(req, reply.content) if reply.status == 200 and reply.body is None else None
            usage = (completion or {}).get("usage") or {}
            self.account.used(ticket, int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)))
            if completion is not None:
                self._bill(req, completion)
            self._wait_for_release(req)
            delay = latency + max(0.0, reply.delay_s)
            if delay > 0:
                self._stopping.wait(delay)
            if completion is not None:
                payload = json.dumps(completion).encode()
            elif isinstance(reply.body, str):
                payload = reply.body.encode()
            elif reply.body is not None:
                payload = json.dumps(reply.body).encode()
            else:
                payload = json.dumps(error_reply(reply.status, "error").body).encode()
            return reply.status, payload, dict(reply.headers)
        finally:
            # Counted out *before* the bytes go out: a client can only start its
            # next call after reading this reply, so in_flight never overcounts.
            self._leave(status)


# --------------------------------------------------------------------------
# as a process
# --------------------------------------------------------------------------


def _parse_fault(text: str) -> tuple[str, float]:
    kind, _, rate = text.partition("=")
    if kind not in FAULT_KINDS or not rate:
        raise argparse.ArgumentTypeError(f"expected KIND=RATE with KIND in {FAULT_KINDS}, got {text!r}")
    return kind, float(rate)


def _parse_fraction(text: str) -> tuple[str, float]:
    model, _, rate = text.partition("=")
    if not model or not rate:
        raise argparse.ArgumentTypeError(f"expected MODEL=RATE, got {text!r}")
    return model, float(rate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="OpenAI-compatible rule-based judge server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-mean", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--latency-jitter", type=float, default=0.0, help="+- uniform seconds")
    parser.add_argument("--fault", action="append", type=_parse_fault, default=[], metavar="KIND=RATE",
                        help=f"inject faults, KIND in {FAULT_KINDS}; repeatable")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stall", type=float, default=30.0, help="seconds a 'stall' fault waits")
    parser.add_argument("--retry-after", default="0", help="Retry-After sent with injected 429s")
    parser.add_argument("--reply-form", default=None, metavar="FORM",
                        help="answer in this form of tests.support.reply_forms.LAX_FORMS (e.g. prose, all-at-once)")
    parser.add_argument("--toxic-fraction", action="append", type=_parse_fraction, default=[], metavar="MODEL=RATE",
                        help="the judge MODEL flags this fraction of opinions toxic (fraction_responder); repeatable")
    parser.add_argument("--batch-turnaround", type=float, default=0.05,
                        help="seconds from a batch's creation until its lines are answered")
    parser.add_argument("--batch-discount", type=float, default=0.5,
                        help="a batch line is billed this fraction of the online price")
    parser.add_argument("--prices", default="0,0", metavar="IN,OUT",
                        help="USD per million prompt and completion tokens the server bills (billed_usd)")
    parser.add_argument("--rpm-limit", type=int, default=None,
                        help="the account's requests per minute: a 429 past it (a sliding 60 s window)")
    parser.add_argument("--tpm-limit", type=int, default=None,
                        help="the account's tokens per minute (usage of the requests it accepted): a 429 past it")
    args = parser.parse_args(argv)
    if not 0 < args.batch_discount <= 1:
        parser.error(f"--batch-discount: expected a fraction in (0, 1], got {args.batch_discount:g}")

    responder = reply_form_responder(args.reply_form) if args.reply_form else None
    if args.toxic_fraction:
        responder = fraction_responder(dict(args.toxic_fraction), responder)
    server = JudgeServer(
        responder,
        latency_mean_s=args.latency_mean,
        latency_jitter_s=args.latency_jitter,
        fault_rates=dict(args.fault),
        seed=args.seed,
        stall_s=args.stall,
        fault_retry_after=args.retry_after,
        host=args.host,
        port=args.port,
        batch_turnaround_s=args.batch_turnaround,
        batch_discount=args.batch_discount,
        prices_per_mtok=tuple(float(p) for p in args.prices.split(",")),
        rpm_limit=args.rpm_limit,
        tpm_limit=args.tpm_limit,
    ).start()
    print(server.url, flush=True)

    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(0.5):
            pass
    finally:
        stats = server.stats()
        server.stop()
        print(json.dumps(stats), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
