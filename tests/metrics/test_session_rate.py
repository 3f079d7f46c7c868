"""A session's rate of a trace metric from its turns' results, and its spec in the registry."""

from __future__ import annotations

import pytest

from judgeflow.errors import MetricError
from judgeflow.metrics.registry import (MetricSettings, MetricSpec, register, registered, reported, session_rate_of,
                                        unregister)
from judgeflow.metrics.session_rate import TurnResult, session_rate

PASS, FAIL = TurnResult("scored", True), TurnResult("scored", False)


def test_a_session_fails_when_any_turn_failed_and_its_score_is_the_share_of_failed_turns():
    result = session_rate("toxicity_session", [PASS, FAIL, PASS, TurnResult("skipped", None),
                                               TurnResult(None, None)])
    assert result is not None
    assert (result.score, result.passed, result.threshold) == (pytest.approx(1 / 3), False, 0.0)
    assert result.details == {"turns": 5, "scored_turns": 3, "failed_turns": 1}
    assert (result.judge_calls, result.cost_usd) == (0, 0.0)
    clean = session_rate("toxicity_session", [PASS, PASS])
    assert clean is not None and (clean.score, clean.passed) == (0.0, True)
    # a threshold of its own lets a share of failed turns pass
    assert session_rate("toxicity_session", [PASS, FAIL, PASS, PASS], threshold=0.25).passed is True


def test_a_session_with_no_scored_turn_has_no_rate_never_a_pass():
    assert session_rate("toxicity_session", []) is None
    assert session_rate("toxicity_session", [TurnResult("failed", None), TurnResult("skipped", None),
                                             TurnResult(None, None)]) is None


def test_every_trace_metric_has_a_session_rate_reported_after_it_but_never_judged():
    specs, shown = registered(), reported()
    for name, spec in specs.items():
        rate = session_rate_of(spec)
        assert rate is session_rate_of(spec) and rate.name == f"{name}_session" and rate.name not in specs
        assert list(shown).index(rate.name) == list(shown).index(name) + 1
        assert (rate.level, rate.rate_of, dict(rate.steps)) == ("session", name, {})
        assert rate.settings().threshold == 0.0 and rate.settings().regression_min_increase is None
        assert rate.settings().rate_max == spec.settings().rate_max
        with pytest.raises(MetricError, match="never judged"):
            rate.build(None, None, None)


def test_a_metric_named_as_a_session_rate_is_refused_and_a_plugins_session_rule_is_off():
    first = next(iter(registered().values()))
    taken = MetricSpec(name=f"{first.name}_session", steps={}, version_of=lambda: "1", fields=("output",),
                       cost=first.cost, build=first.build)
    with pytest.raises(MetricError, match="clashes with the session rate"):
        register(taken)
    with pytest.raises(MetricError, match="never registered"):
        register(session_rate_of(first))
    class Paging(MetricSettings):
        rate_max: float | None = 0.2

    plain = MetricSpec(name="plain_metric", steps={}, version_of=lambda: "1", fields=("output",), cost=first.cost,
                       build=first.build, settings=Paging)
    register(plain)
    try:
        # a plugin's session rule is off by default even when its per-trace rule is on (only built-ins inherit)
        assert session_rate_of(plain).settings().rate_max is None
        clash = MetricSpec(name="plain_metric_session", steps={}, version_of=lambda: "1", fields=("output",),
                           cost=first.cost, build=first.build)
        with pytest.raises(MetricError, match="plain_metric"):
            register(clash)
    finally:
        unregister("plain_metric")
    assert "plain_metric" not in registered()


def test_a_metrics_file_may_not_name_a_metric_as_a_session_rate(tmp_path):
    from judgeflow.metrics.geval.file import load_metrics_file

    first = next(iter(registered()))
    for names, culprit in (([f"{first}_session"], first), (["helpful", "helpful_session"], "helpful")):
        path = tmp_path / "metrics.toml"
        path.write_text("".join(f'[metrics.{name}]\ncriteria = "Is it helpful?"\n' for name in names),
                        encoding="utf-8")
        with pytest.raises(MetricError, match=f"clashes with the session rate of metric '{culprit}'"):
            load_metrics_file(path)
