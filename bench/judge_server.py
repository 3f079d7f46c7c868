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

if __name__ == "__main__":
    raise SystemExit(judge_server.main())
