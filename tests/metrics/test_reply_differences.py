"""docs/metrics.md's table of reply forms: judgeflow's column is what its parser does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from judgeflow.metrics.steps import parse_reply
from judgeflow.metrics.toxicity.schema import Opinions, ToxicityReason, Verdicts

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| (opinions|reason|verdicts \((\d+) opinions?\)) \| `(.+?)`[^|]* \| (accepted|re-asked)[^|]* \|")


def _rows() -> list[tuple[str, int | None, str, str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            step, n, reply, verdict = match.groups()
            rows.append((step.split()[0], None if n is None else int(n), reply.replace("⏎", "\n"), verdict))
    return rows


def test_the_table_is_there_and_covers_both_outcomes():
    rows = _rows()
    assert len(rows) >= 10
    assert {r[3] for r in rows} == {"accepted", "re-asked"}
    assert "as deepeval's and Opik's parsers accept" not in PAGE.read_text()


@pytest.mark.parametrize("step,n,reply,outcome", _rows())
def test_judgeflow_column(step, n, reply, outcome):
    schema = {"opinions": Opinions, "reason": ToxicityReason, "verdicts": Verdicts}[step]
    context = None if n is None else {"expected": n}
    if outcome == "accepted":
        parse_reply(reply, schema, context)
    else:
        with pytest.raises(ValidationError):
            parse_reply(reply, schema, context)
