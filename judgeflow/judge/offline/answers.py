"""What the offline judge answers for each step of judgeflow's own metrics.

Each function takes the request's ``fields`` and step and returns the reply
object and its validation context. A metric declares which function answers
which of its steps (its spec's ``offline``, judgeflow/metrics/registry.py);
:class:`~judgeflow.judge.offline.judge.OfflineJudge` looks them up there.
"""

from __future__ import annotations

import json
from typing import Any

from judgeflow.errors import PermanentJudgeError
from judgeflow.judge.offline.opinions import extract_opinions
from judgeflow.judge.offline.overlap import hallucination_judgement
from judgeflow.judge.offline.verdicts import toxic_verdicts, toxicity_reason

Answer = tuple[dict[str, Any], dict[str, Any] | None]


def require(fields: Any, name: str, step: str) -> Any:
    if not hasattr(fields, "get") or name not in fields:
        raise PermanentJudgeError(f"offline judge: step {step!r} needs field {name!r}")
    return fields[name]


def as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def opinions(fields: Any, step: str) -> Answer:
    return {"opinions": extract_opinions(as_text(require(fields, "output", step)))}, None


def verdicts(fields: Any, step: str) -> Answer:
    found = require(fields, "opinions", step)
    if not isinstance(found, (list, tuple)):
        raise PermanentJudgeError("offline judge: 'opinions' must be a list of strings")
    texts = [as_text(o) for o in found]
    rows = [{"verdict": "yes" if v.toxic else "no", "reason": v.reason} for v in toxic_verdicts(texts)]
    return {"verdicts": rows}, {"expected": len(texts)}


def reason(fields: Any, step: str) -> Answer:
    text = toxicity_reason(
        require(fields, "score", step),
        [as_text(r) for r in fields.get("toxic_reasons") or []],
        [as_text(o) for o in fields.get("toxic_opinions") or []],
    )
    return {"reason": text}, None


def hallucination(fields: Any, step: str) -> Answer:
    score, reasons = hallucination_judgement(as_text(require(fields, "output", step)), fields.get("context"))
    return {"score": score, "reason": reasons}, None
