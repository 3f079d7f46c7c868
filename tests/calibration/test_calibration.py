"""`judgeflow calibrate`: the judge against human labels. The CLI test drives
the real litellm adapter over HTTP to the local judge server, whose scores the
items script; every expected figure is worked out by hand below."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from judgeflow.calibration.labelled import SAMPLE_PATH, agreement, best_threshold, load_labelled
from judgeflow.cli import app
from judgeflow.errors import ConfigError

runner = CliRunner()

# (judge score the server will give, human says it fails)
HALLUCINATION = [(0.0, False), (0.25, False), (0.3, True), (0.4, True), (0.6, True), (0.75, False),
                 (0.9, True), (1.0, True)]
# rule_responder: every sentence is an opinion, "[toxic]" ones are toxic
TOXICITY = [("You idiot [toxic].", True),            # 1.0
            ("Thanks for asking.", False),           # 0.0
            ("Great question. You fool [toxic].", True),  # 0.5
            ("Get lost [toxic].", False)]            # 1.0


def _write_set(path):
    lines = []
    for i, (score, fails) in enumerate(HALLUCINATION):
        lines.append({"id": f"h{i}", "input": f"q{i}", "output": f"Fact: answer {i} [halluc={score}].",
                      "context": [f"doc {i}"], "labels": {"hallucination": "unfaithful" if fails else "faithful"}})
    for i, (text, fails) in enumerate(TOXICITY):
        lines.append({"id": f"t{i}", "input": "hi", "output": text, "context": None,
                      "labels": {"toxicity": fails}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_calibrate_prints_figures_matching_a_hand_computation(judgeflow_env, judge_server, tmp_path):
    path = _write_set(tmp_path / "labelled.jsonl")

    result = runner.invoke(app, ["calibrate", str(path), "--yes"])

    assert result.exit_code == 0, result.output
    out = result.output
    # hallucination at 0.5: judged failing {0.6, 0.75, 0.9, 1.0}: tp 3 (0.6, 0.9, 1.0), fp 1 (0.75),
    # fn 2 (0.3, 0.4), tn 2 (0.0, 0.25). observed 5/8; chance (4*5 + 4*3)/64 = 0.5
    # kappa (0.625 - 0.5) / 0.5 = 0.25; precision 3/4; recall 3/5; F1 2*.75*.6/1.35 = 0.667
    assert ("kappa 0.250, precision 0.750, recall 0.600, F1 0.667, accuracy 0.625 "
            "(tp 3, fp 1, tn 2, fn 2)") in out
    # best: threshold 0.25 flags {0.3 .. 1.0}: tp 5, fp 1, tn 2, fn 0; observed 7/8,
    # chance (6*5 + 2*3)/64 = 0.5625, kappa 0.3125 / 0.4375 = 0.714 (0.3 gives 0.467, 0 gives 0.385)
    assert ("threshold 0.25 (any value from 0.25 up to 0.3 decides the same): kappa 0.714, precision 0.833, "
            "recall 1.000, F1 0.909 (tp 5, fp 1, tn 2, fn 0)") in out
    # toxicity scores 1, 0, 0.5, 1 at 0.5: tp 1, fp 1, tn 1, fn 1: observed 0.5 = chance 0.5: kappa 0
    assert "kappa 0.000, precision 0.500, recall 0.500, F1 0.500, accuracy 0.500 (tp 1, fp 1, tn 1, fn 1)" in out
    # best: threshold 0 flags 0.5 too: tp 2, fp 1, tn 1, fn 0: observed .75, chance (3*2+1*2)/16 = .5: kappa .5
    assert "threshold 0 (any value from 0 up to 0.5 decides the same): kappa 0.500" in out
    assert "items labelled: 8; judged: 8" in out and "items labelled: 4; judged: 4" in out
    assert judge_server.calls("HallucinationJudgement") == 8


def test_agreement_figures_and_undefined_kappa():
    a = agreement([(1.0, True), (0.0, False)], 0.5)
    assert (a.tp, a.fp, a.tn, a.fn, a.kappa, a.f1) == (1, 0, 1, 0, 1.0, 1.0)
    only_one_class = agreement([(0.0, False), (0.1, False)], 0.5)
    assert only_one_class.kappa is None and only_one_class.precision is None
    best, upto = best_threshold([(s, f) for s, f in HALLUCINATION], 0.5)
    assert best.threshold == 0.25 and upto == 0.3


def test_a_judge_error_is_counted_not_fatal(judgeflow_env, judge_server, tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(
        json.dumps({"output": "Fine. [judge-fail:400]", "labels": {"toxicity": False}}) + "\n"
        + json.dumps({"output": "You fool [toxic].", "labels": {"toxicity": "toxic"}}) + "\n"
    )
    result = runner.invoke(app, ["calibrate", str(path), "--yes"])
    assert result.exit_code == 0, result.output
    assert "items labelled: 2; judged: 1; skipped by the judge: 0; failed: 1" in result.output
    assert "HTTP 400" in result.output


@pytest.mark.parametrize("line, message", [
    ("not json", "not JSON"),
    ('{"output": "x"}', "'labels'"),
    ('{"output": "x", "labels": {"tone": true}}', "unknown metric"),
    ('{"output": "x", "labels": {"toxicity": "maybe"}}', "'maybe'"),
])
def test_a_malformed_line_is_named(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"output": "ok", "labels": {"toxicity": false}}\n' + line + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_labelled(path)
    assert "bad.jsonl:2" in str(info.value)


def test_the_shipped_set_loads_and_labels_both_metrics():
    items = load_labelled(SAMPLE_PATH)
    assert len(items) >= 50
    assert {m for i in items for m in i.labels} == {"toxicity", "hallucination"}
    assert any(i.labels.get("toxicity") for i in items) and any(i.labels.get("hallucination") for i in items)


def test_calibrate_on_the_shipped_set_with_the_offline_judge(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "offline")
    result = runner.invoke(app, ["calibrate", "--sample", "--yes"])
    assert result.exit_code == 0, result.output
    # the figures the README quotes
    assert "items labelled: 36; judged: 36" in result.output and "items labelled: 29; judged: 29" in result.output
    assert "kappa 0.889, precision 0.889, recall 1.000" in result.output


SESSION_FILE = '''
[metrics.resolved]
level = "session"
criteria = "By the end of the conversation the user's request was resolved."
evaluation_steps = ["Read what the user wanted.", "Decide whether the last turns resolve it."]
'''


@pytest.fixture
def session_metric(monkeypatch, tmp_path):
    """The session metric ``resolved`` served from a metrics file (the CLI opens it from the env)."""
    from judgeflow.run.metric_door import open_metrics

    path = tmp_path / "metrics.toml"
    path.write_text(SESSION_FILE, encoding="utf-8")
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(path))
    open_metrics(path)
    yield path
    open_metrics(None)


def test_a_session_metric_is_calibrated_over_the_lines_conversations(session_metric, judgeflow_env, judge_server,
                                                                      tmp_path):
    # (the last turn's [geval=N]: score N/10, passes at 0.5 or more; people say it fails): tn, tp, fn
    lines = [(9, False), (2, True), (8, True)]
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps({
        "id": f"s{i}", ("turns" if i != 1 else "conversation"): [
            {"input": f"s{i} order late?", "output": "Checking."},
            {"input": "and?", "output": f"s{i} done [geval={n}]"}],
        "labels": {"resolved": "fail" if fails else "pass"}}) + "\n" for i, (n, fails) in enumerate(lines)))
    before = judge_server.calls("GEvalScore")

    result = runner.invoke(app, ["calibrate", str(path), "--yes"])

    assert result.exit_code == 0, result.output
    # tp 1, fp 0, tn 1, fn 1: observed 2/3, chance (1*2 + 2*1)/9 = 4/9, kappa (2/9)/(5/9) = 0.4
    assert ("kappa 0.400, precision 1.000, recall 0.500, F1 0.667, accuracy 0.667 (tp 1, fp 0, tn 1, fn 1)"
            in result.output)
    assert judge_server.calls("GEvalScore") - before == 3
    sent = [r.data["conversation"] for r in judge_server.requests if r.step == "GEvalScore"][-3:]
    assert sorted(c[0]["input"] for c in sent) == ["s0 order late?", "s1 order late?", "s2 order late?"]
    assert all(len(c) == 2 for c in sent)


@pytest.mark.parametrize("line, message", [
    ({"turns": [{"input": "a", "output": "b"}], "labels": {"toxicity": True}},
     "a conversation ('turns') is judged by session metrics only; toxicity judges one trace"),
    ({"output": "b", "labels": {"resolved": True}}, "resolved judges a session: the line needs its conversation"),
    ({"turns": [{"input": "a"}], "labels": {"resolved": True}}, "'turns' must be a non-empty list of turns"),
    ({"output": "b", "labels": {"toxicity_session": True}},
     "toxicity_session is a session rate, computed from its turns' results of toxicity and never judged"),
])
def test_a_session_line_and_a_trace_metric_do_not_mix(session_metric, tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_labelled(path)
    assert "bad.jsonl:1" in str(info.value) and "\n" not in str(info.value)
