"""The test judge server (``tests.support.judge_server``) as the benchmark runs
it: ``python -m bench.judge_server --port 0 --latency-mean 0.2 ...`` (same
options), with one addition (the server itself turns Nagle's algorithm off:
with it on, every call to an "instant" judge took ~45 ms on the wire, measured
48.8 ms per call against 5.8 ms without).

* **``GET /in-flight``**: requests in flight over time, as the time-weighted
  mean per ``?step=`` seconds (default 0.25) from the first request to the
  last reply (``first_at``, ``last_at``: ``time.monotonic()``, which is the
  machine's, not the process's, on Linux): ``{"step_s": 0.25, "first_at": t0,
  "last_at": t1, "means": [...]}``; shows where a run's calls in flight
  fell short (its start, its batches' tails, its end).
* **``GET /pair-calls``**: how many first-step calls (``Opinions`` for
  toxicity, ``HallucinationJudgement`` for hallucination) each trace output
  received, summarised: ``{"pairs": n, "max_calls_per_pair": m,
  "pairs_called_more_than_once": k}``. A (trace, metric) that reached the
  judge twice shows up here even if only one result row was stored.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

from tests.support import judge_server

FIRST_STEPS = ("Opinions", "HallucinationJudgement")

_plain_get = judge_server._Handler.do_GET


def pair_calls(server: judge_server.JudgeServer) -> dict:
    with server._lock:
        requests = list(server.requests)
    counts = Counter(
        (str(r.data.get("output")), r.step) for r in requests if r.step in FIRST_STEPS and r.data is not None
    )
    return {
        "pairs": len(counts),
        "max_calls_per_pair": max(counts.values(), default=0),
        "pairs_called_more_than_once": sum(1 for n in counts.values() if n > 1),
    }


_changes: list[tuple[float, int]] = []  # (time.monotonic(), requests in flight from then on)
_plain_enter, _plain_leave = judge_server.JudgeServer._enter, judge_server.JudgeServer._leave


def _enter(self, req) -> None:
    _plain_enter(self, req)
    with self._lock:
        _changes.append((time.monotonic(), self._in_flight))


def _leave(self, status: int) -> None:
    _plain_leave(self, status)
    with self._lock:
        _changes.append((time.monotonic(), self._in_flight))


def in_flight_means(server: judge_server.JudgeServer, step_s: float) -> list[float]:
    """Time-weighted mean of requests in flight per ``step_s`` from the first request."""
    with server._lock:
        changes = list(_changes)
    if not changes:
        return []
    start, end = changes[0][0], changes[-1][0]
    area = [0.0] * (int((end - start) / step_s) + 1)
    for (t0, n), (t1, _) in zip(changes, changes[1:]):
        # spread the interval over the buckets it crosses; the bucket index moves on
        # by itself (recomputed from t0, a step that is not a binary fraction, 0.1,
        # could give an edge equal to t0 and loop for ever)
        i = int((t0 - start) / step_s)
        while t0 < t1:
            edge = min(t1, start + (i + 1) * step_s)
            if edge > t0:
                area[min(i, len(area) - 1)] += n * (edge - t0)
                t0 = edge
            i += 1
    return [round(a / step_s, 1) for a in area]


def _reset(self) -> None:
    _plain_reset(self)
    with self._lock:
        _changes.clear()


_plain_reset = judge_server.JudgeServer.reset
judge_server.JudgeServer._enter, judge_server.JudgeServer._leave = _enter, _leave
judge_server.JudgeServer.reset = _reset


def _do_get(self) -> None:  # noqa: N802
    url = urlsplit(self.path)
    if url.path == "/pair-calls":
        self._send(200, json.dumps(pair_calls(self.judge)).encode())
    elif url.path == "/in-flight":
        step = float(parse_qs(url.query).get("step", ["0.25"])[0])
        with self.judge._lock:
            span = (_changes[0][0], _changes[-1][0]) if _changes else (None, None)
        self._send(200, json.dumps({"step_s": step, "first_at": span[0], "last_at": span[1],
                                    "means": in_flight_means(self.judge, step)}).encode())
    else:
        _plain_get(self)


judge_server._Handler.do_GET = _do_get

# The peer benchmark (bench/peer.py) points deepeval's ToxicityMetric and
# HallucinationMetric at this server. Their requests carry no judgeflow data
# block; they are answered by their structured-output schema's name with
# fixed, valid replies: two opinions (so toxicity makes its three calls:
# opinions, verdicts, reason) and one verdict per list.
_PEER_REPLIES = {
    "Opinions": {"opinions": ["I like this plan.", "You are clueless."]},
    "Verdicts": {"verdicts": [{"verdict": "no", "reason": "Not toxic and consistent with the context."}]},
    "ToxicityScoreReason": {"reason": "The score is 0.00 because no opinion was toxic."},
    "HallucinationScoreReason": {"reason": "The score is 0.00 because the output agrees with the context."},
}
_rule_responder = judge_server.rule_responder


def peer_or_rule_responder(req: judge_server.ChatRequest) -> judge_server.Reply:
    if req.data is None and req.step in _PEER_REPLIES:
        reply = _PEER_REPLIES[req.step]
        prompt = json.dumps(req.messages).lower()
        if req.step == "Verdicts" and "context" in prompt and "opinions:" not in prompt:
            # hallucination: "yes" means the output agrees with the context
            reply = {"verdicts": [{"verdict": "yes", "reason": "The output agrees with the context."}]}
        return judge_server.json_reply(reply)
    return _rule_responder(req)


judge_server.rule_responder = peer_or_rule_responder  # the server's default responder

if __name__ == "__main__":
    raise SystemExit(judge_server.main())
