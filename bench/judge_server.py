"""The test judge server (``tests.support.judge_server``) as the benchmark runs
it: ``python -m bench.judge_server --port 0 --latency-mean 0.2 ...`` (same
options), with one addition (the server itself turns Nagle's algorithm off:
with it on, every call to an "instant" judge took ~45 ms on the wire, measured
48.8 ms per call against 5.8 ms without).

* **``GET /pair-calls``**: how many first-step calls (``Opinions`` for
  toxicity, ``HallucinationJudgement`` for hallucination) each trace output
  received, summarised: ``{"pairs": n, "max_calls_per_pair": m,
  "pairs_called_more_than_once": k}``. A (trace, metric) that reached the
  judge twice shows up here even if only one result row was stored.
"""

from __future__ import annotations

import json
from collections import Counter

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


def _do_get(self) -> None:  # noqa: N802
    if self.path.split("?", 1)[0] == "/pair-calls":
        self._send(200, json.dumps(pair_calls(self.judge)).encode())
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
