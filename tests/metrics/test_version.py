"""metric_version follows the prompts and schemas, and nothing else."""

from __future__ import annotations

import json
import re

import pytest
from judgeflow.metrics import FewShotExample, HallucinationMetric, ToxicityMetric, data_block
from judgeflow.metrics.hallucination import template as hallucination_template
from judgeflow.metrics.hallucination.metric import hallucination_version
from judgeflow.metrics.toxicity import template as toxicity_template
from judgeflow.metrics.toxicity.metric import toxicity_version
from judgeflow.metrics.toxicity.schema import Verdicts

from tests.metrics.fakes import ScriptedJudge


def test_format() -> None:
    assert re.fullmatch(r"toxicity/3\+[0-9a-f]{8}", toxicity_version())
    assert re.fullmatch(r"hallucination/3\+[0-9a-f]{8}", hallucination_version())


def test_stable_across_calls_and_instances() -> None:
    judge = ScriptedJudge({})
    assert toxicity_version() == toxicity_version() == ToxicityMetric(judge).metric_version
    assert ToxicityMetric(judge, threshold=0.1, strict_mode=True).metric_version == toxicity_version()
    assert hallucination_version() == HallucinationMetric(judge, threshold=0.9).metric_version


@pytest.mark.parametrize(
    "name",
    [
        "OPINIONS_INSTRUCTIONS", "VERDICTS_INSTRUCTIONS", "REASON_INSTRUCTIONS", "STRICT_REASON_INSTRUCTIONS",
        "VERDICTS_SHAPE",
    ],
)
def test_toxicity_version_changes_with_a_template(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    before = toxicity_version()
    monkeypatch.setattr(toxicity_template, name, getattr(toxicity_template, name) + " Be brief.")
    after = toxicity_version()
    assert after != before and after.startswith("toxicity/3+")
    assert ToxicityMetric(ScriptedJudge({})).metric_version == after


@pytest.mark.parametrize(
    "name", ["WITH_CONTEXT_INSTRUCTIONS", "NO_CONTEXT_INSTRUCTIONS", "EXAMPLES_INTRO", "SHAPE"]
)
def test_hallucination_version_changes_with_a_template(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    before = hallucination_version()
    monkeypatch.setattr(hallucination_template, name, getattr(hallucination_template, name) + " Be brief.")
    assert hallucination_version() != before


def test_version_changes_with_the_data_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    before = (toxicity_version(), hallucination_version())
    # The templates import DATA_NOTICE by name, so patch it where they read it.
    monkeypatch.setattr(toxicity_template, "DATA_NOTICE", data_block.DATA_NOTICE + " Really.")
    monkeypatch.setattr(hallucination_template, "DATA_NOTICE", data_block.DATA_NOTICE + " Really.")
    assert (toxicity_version(), hallucination_version()) != before


def test_version_changes_with_a_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    before = toxicity_version()
    original = Verdicts.model_json_schema()
    # Stands in for a field change: what the hash sees is the JSON schema.
    monkeypatch.setattr(Verdicts, "model_json_schema", classmethod(lambda cls, *a, **k: {**original, "x": 1}))
    assert toxicity_version() != before


def test_few_shot_examples_change_the_hallucination_version() -> None:
    example = FewShotExample(title="t", input="i", context=None, output="o", score=0.0, reason="r")
    judge = ScriptedJudge({})
    with_examples = HallucinationMetric(judge, few_shot_examples=[example]).metric_version
    assert with_examples != hallucination_version()
    assert with_examples == hallucination_version([example])
    assert with_examples.startswith("hallucination/3+")


def test_issue_32_changed_both_versions() -> None:
    """Replies are read tolerantly (a verdict without a reason, extra keys, JSON
    in prose) and the hallucination judge is asked for 0 or 1: scores before
    and after are not comparable, and the major versions say so."""
    assert toxicity_version().startswith("toxicity/3+")
    assert hallucination_version().startswith("hallucination/3+")


def test_version_follows_how_non_ascii_text_is_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    before = (toxicity_version(), hallucination_version())
    escaped = lambda data: data_block.BEGIN + "\n" + json.dumps(dict(data)) + "\n" + data_block.END  # noqa: E731
    monkeypatch.setattr(toxicity_template, "render_data_block", escaped)
    monkeypatch.setattr(hallucination_template, "render_data_block", escaped)
    after = (toxicity_version(), hallucination_version())
    assert after[0] != before[0] and after[1] != before[1]
