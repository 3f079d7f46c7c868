"""Scores written back to Arize Phoenix as span annotations (``JUDGEFLOW_PHOENIX_WRITE_BACK``).

With ``JUDGEFLOW_SOURCE=phoenix`` a judged trace is an LLM span; each of its scored
results becomes one annotation on that span through Phoenix's public REST API
(``POST /v1/span_annotations``): name ``judgeflow.<metric>``, identifier ``judgeflow``,
``annotator_kind`` LLM, label ``pass`` or ``fail``, the score and the reason. Phoenix keeps
one annotation per (name, span, identifier) and updates it on a second write, so a re-run
or a re-score never duplicates one. judgeflow's results table stays the source of truth:
a write-back that fails is reported, never retried into the run's outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import httpx

IDENTIFIER = "judgeflow"
BATCH = 100


def annotation_name(metric: str) -> str:
    return f"judgeflow.{metric}"


def annotation(result: dict[str, Any]) -> dict[str, Any]:
    """One eval_results row as Phoenix's span-annotation payload."""
    return {
        "span_id": result["trace_id"],
        "name": annotation_name(result["metric"]),
        "annotator_kind": "LLM",
        "identifier": IDENTIFIER,
        "result": {
            "label": "pass" if result["passed"] else "fail",
            "score": result["score"],
            "explanation": result.get("reason"),
        },
        "metadata": {
            "judge_model": result.get("judge_model"), "metric_version": result.get("metric_version"),
            "threshold": result.get("threshold"), "flow_run_id": result.get("flow_run_id"),
        },
    }


@dataclass
class WriteBack:
    written: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        if not self.failed:
            return f"{self.written} score(s) written to Phoenix as span annotations"
        return (f"{self.written} score(s) written to Phoenix as span annotations, {self.failed} not: "
                f"{'; '.join(self.errors[:3])} (the results table has them all)")


def write_annotations(base_url: str, results: Iterable[dict[str, Any]], *, api_key: str | None = None,
                      timeout_s: float = 30.0) -> WriteBack:
    """POSTs the results in batches; a batch Phoenix refuses or that cannot reach it is
    counted as failed with the reason. Never raises."""
    out = WriteBack()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    rows = [annotation(r) for r in results]
    todo = [rows[start:start + BATCH] for start in range(0, len(rows), BATCH)]
    with httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s) as client:
        while todo:
            batch = todo.pop(0)
            try:
                reply = client.post("/v1/span_annotations", params={"sync": "true"}, json={"data": batch})
            except httpx.HTTPError as exc:
                out.failed += len(batch)
                out.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if 400 <= reply.status_code < 500 and len(batch) > 1:
                # Phoenix refuses a whole batch for one span it no longer holds: one by one
                todo = [[row] for row in batch] + todo
            elif reply.status_code >= 300:
                out.failed += len(batch)
                out.errors.append(f"span {batch[0]['span_id']}: HTTP {reply.status_code}: {reply.text[:200]}"
                                  if len(batch) == 1 else f"HTTP {reply.status_code}: {reply.text[:200]}")
            else:
                out.written += len(batch)
    return out
