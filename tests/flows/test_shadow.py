"""Shadow scoring through the real flow: real PostgreSQL, real Prefect, the local
judge server with two scripted judges. ``judge-a`` (in force) and ``judge-b``
(the candidate) flag only opinions marked for them: ``[toxic]`` both,
``[toxic:judge-b]`` only the candidate, ``[toxic:judge-a]`` only the current
judge, so every figure of the report can be worked out by hand here.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.db import migrate
from judgeflow.flows.scoring import score_new_traces
from judgeflow.flows.shadow import shadow_score
from tests.support.judge_server import JudgeServer, fraction_responder
from tests.support.traces import insert_traces

Z = 1.959963984540054
# per app: (both flag, only the candidate flags, only the current judge flags, neither)
PLAN = {"a": (2, 2, 1, 7), "b": (1, 3, 0, 4), "c": (0, 0, 1, 2)}
MARKS = ("[toxic]", "[toxic:judge-b]", "[toxic:judge-a]", "")


def _traces(plan=PLAN, *, without_app: int = 0) -> list[dict]:
    now = datetime.now(timezone.utc)
    rows = []
    for app, counts in plan.items():
        for kind, n in enumerate(counts):
            for i in range(n):
                rows.append({
                    "id": f"{app}-{kind}-{i}",
                    "created_at": now - timedelta(hours=len(rows) + 1),
                    "output": f"Reply {app} {kind} {i} {MARKS[kind]}".strip(),
                    "metadata": {"app": app},
                })
    for i in range(without_app):
        rows.append({"id": f"none-{i}", "created_at": now - timedelta(hours=2, minutes=i), "output": f"Reply {i}",
                     "metadata": {"region": "eu"}})
    return rows


@pytest.fixture
def shadow_env(judgeflow_env, monkeypatch, db):
    migrate.upgrade(db)  # the test server's user is "judgeflow": the schema first (see test_judge_epochs)
    with JudgeServer(fraction_responder({"judge-a": 0.0, "judge-b": 0.0})) as server:
        monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", server.url)
        monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/judge-a")
        monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
        monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "1")
        monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_MAX", "0.05")  # firing under judge-a: must not move
        monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
        yield server


def _dump(db, table: str) -> list[str]:
    with db.connect() as conn:
        return [r[0] for r in conn.execute(sa.text(
            f"SELECT row_to_json(t)::text FROM judgeflow.{table} t ORDER BY row_to_json(t)::text"))]


def _score_current():
    state = score_new_traces(metrics=["toxicity"], return_state=True)
    assert state.is_completed()
    return state.result()


def test_shadow_report_equals_the_figures_worked_out_by_hand(prefect_server, shadow_env, db):
    insert_traces(db, _traces())
    _score_current()
    before = {t: _dump(db, t) for t in ("eval_results", "alerts", "alert_events", "judge_epochs")}
    assert len(before["eval_results"]) == 23 and before["alert_events"]  # the rate rule fired under judge-a

    report = shadow_score(since=datetime.now(timezone.utc) - timedelta(days=2), judge_model="openai/judge-b",
                          metrics=["toxicity"], segment_by="app", per_segment=20)

    # nothing but shadow_results was written
    assert {t: _dump(db, t) for t in before} == before
    with db.connect() as conn:
        stored = conn.execute(sa.text(
            "SELECT count(*), count(DISTINCT shadow_run_id) FROM judgeflow.shadow_results")).one()
    assert tuple(stored) == (23, 1)

    [m] = report.metrics
    both_fail = sum(p[0] for p in PLAN.values())
    only_b = sum(p[1] for p in PLAN.values())
    only_a = sum(p[2] for p in PLAN.values())
    both_pass = sum(p[3] for p in PLAN.values())
    n = both_fail + only_b + only_a + both_pass
    assert m.confusion == {"both_pass": both_pass, "only_candidate_fails": only_b, "only_current_fails": only_a,
                           "both_fail": both_fail}
    assert (m.sampled, m.compared, n) == (23, 23, 23)
    po = Fraction(both_pass + both_fail, n)
    current_pass, candidate_pass = Fraction(both_pass + only_b, n), Fraction(both_pass + only_a, n)
    pe = current_pass * candidate_pass + (1 - current_pass) * (1 - candidate_pass)
    k = (po - pe) / (1 - pe)
    assert k == Fraction(58, 219)  # worked out on paper: po 16/23, pe 310/529
    assert m.kappa == pytest.approx(float(k), abs=1e-12)
    # Fleiss-Cohen-Everitt, rows the current judge (pass, fail), columns the candidate
    cells = [[Fraction(both_pass, n), Fraction(only_b, n)], [Fraction(only_a, n), Fraction(both_fail, n)]]
    rows, cols = [current_pass, 1 - current_pass], [candidate_pass, 1 - candidate_pass]
    var = (sum(cells[i][i] * (1 - (rows[i] + cols[i]) * (1 - k)) ** 2 for i in (0, 1))
           + (1 - k) ** 2 * (cells[0][1] * (cols[0] + rows[1]) ** 2 + cells[1][0] * (cols[1] + rows[0]) ** 2)
           - (k - pe * (1 - k)) ** 2) / (n * (1 - pe) ** 2)
    se = math.sqrt(float(var))
    assert m.kappa_ci == pytest.approx([float(k) - Z * se, float(k) + Z * se], abs=1e-12)
    assert m.kappa_undefined is None
    assert m.current_failing_rate == pytest.approx((both_fail + only_a) / n)
    assert m.candidate_failing_rate == pytest.approx((both_fail + only_b) / n)
    assert m.difference == pytest.approx(3 / 23)
    # Agresti-Min: the Wald interval with half a pair added to each cell
    b2, c2, n2 = only_b + 0.5, only_a + 0.5, n + 2
    d2, se_d = (b2 - c2) / n2, math.sqrt(b2 + c2 - (b2 - c2) ** 2 / n2) / n2
    assert m.difference_ci == pytest.approx([d2 - Z * se_d, d2 + Z * se_d])
    # one opinion per trace: scores are 0 or 1, so the mean score difference is the rate difference
    assert m.mean_score_difference == pytest.approx(3 / 23)

    segments = {s.segment: s for s in m.segments}
    for app, (bf, ob, oa, bp) in PLAN.items():
        size = bf + ob + oa + bp
        s = segments[app]
        assert s.compared == size
        assert s.current_failing_rate == pytest.approx((bf + oa) / size)
        assert s.candidate_failing_rate == pytest.approx((bf + ob) / size)
        assert s.difference == pytest.approx((ob - oa) / size)

    # both judges' work per trace: opinions + verdicts, and a reason for a toxic one
    assert m.candidate.judge_calls == pytest.approx((2 * n + both_fail + only_b) / n)
    assert m.current.judge_calls == pytest.approx((2 * n + both_fail + only_a) / n)
    assert m.candidate.prompt_tokens > 0 and m.current.prompt_tokens > 0

    # where they disagree most: every flipped decision, with both reasons
    flipped = {d.trace_id for d in m.disagreements if d.current_passed != d.candidate_passed}
    assert flipped == {f"{app}-{kind}-{i}" for app, p in PLAN.items() for kind in (1, 2) for i in range(p[kind])}
    d = next(d for d in m.disagreements if d.trace_id == "a-1-0")
    assert (d.current_passed, d.candidate_passed) == (True, False)
    assert "judge-b flags" in d.candidate_reason or "toxic" in d.candidate_reason
    assert d.current_reason

    text = report.render_text()
    assert re.search(r"Cohen's kappa \(pass/fail\) +0\.265 \[", text) and "a-1-0" in text
    assert "| Cohen's kappa (pass/fail) | 0.265" in report.render_markdown()


def test_stratified_sample_covers_every_segment_with_the_asked_number_or_all_it_has(
        prefect_server, shadow_env, db, monkeypatch):
    insert_traces(db, _traces(without_app=2))
    _score_current()
    report = shadow_score(since=datetime.now(timezone.utc) - timedelta(days=2), judge_model="openai/judge-b",
                          metrics=["toxicity"], segment_by="app", per_segment=5)
    with db.connect() as conn:
        per = dict(conn.execute(sa.text(
            "SELECT stratum, count(*) FROM judgeflow.shadow_results GROUP BY 1")).all())
    # a and b have 12 and 8: five each; c has 3 and the traces without the key 2: all of them
    assert per == {"a": 5, "b": 5, "c": 3, "(none)": 2}
    assert {s.segment: s.compared for s in report.metrics[0].segments} == per

    # the report is published as the run's artifact: the markdown rendering
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from judgeflow.tasks.shadow import SHADOW_REPORT_KEY

    async def latest():
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[SHADOW_REPORT_KEY])))
        return [a.data for a in found]

    from judgeflow.config.scrub import scrub

    assert scrub(report.render_markdown()) in asyncio.run(latest())  # credentials masked, as in every artifact

    # the CLI shows the plan and asks first: answering no judges nothing
    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["shadow", "--judge-model", "openai/judge-b", "--size", "4", "--metric",
                                      "toxicity", "--since", "2d"], input="n\n")
    assert result.exit_code == 1, result.output
    assert "13 (trace, metric) pair(s) to judge with openai/judge-b, up to 4 per segment of app" in result.output
    assert "toxicity app=c: 3" in result.output and "aborted; nothing was judged" in result.output
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.shadow_results")).scalar() == 15

    # --yes: it runs, its progress shown as lines (no terminal here) ending on what it stored
    result = CliRunner().invoke(app, ["shadow", "--judge-model", "openai/judge-b", "--size", "4", "--metric",
                                      "toxicity", "--since", "2d", "--yes", "--seed", "another"])
    assert result.exit_code == 0, result.output
    with db.connect() as conn:
        stored = dict(conn.execute(sa.text(
            "SELECT status, count(*) FROM judgeflow.shadow_results WHERE shadow_run_id = "
            "(SELECT shadow_run_id FROM judgeflow.shadow_results ORDER BY scored_at DESC LIMIT 1) GROUP BY 1")).all())
    assert "shadow: 13 (trace, metric) pairs pending" in result.output
    assert f"shadow: 13/13 pairs (100%)" in result.output
    assert f"scored {stored.get('scored', 0)} · skipped {stored.get('skipped', 0)} · failed " \
        f"{stored.get('failed', 0)}" in result.output


def _shadow_flow_parameters() -> list[dict]:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    async def runs():
        async with get_client() as client:
            found = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["shadow-score"])))
        return [r.parameters for r in found]

    return asyncio.run(runs())


def test_a_candidate_on_another_base_gets_its_own_key_never_the_production_one(
        prefect_server, shadow_env, db, monkeypatch):
    production_key = "sk-production-key-4242"
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", production_key)
    insert_traces(db, _traces({"a": (1, 1, 1, 1)}))
    _score_current()
    production_calls = shadow_env.calls()
    from judgeflow.cli import app

    with JudgeServer(fraction_responder({"judge-a": 0.0, "judge-b": 0.0})) as candidate:
        args = ["shadow", "--judge-model", "openai/judge-b", "--judge-api-base", candidate.url, "--metric",
                "toxicity", "--since", "2d", "--yes"]
        # another base and no key of its own: refused before anything is sent
        refused = CliRunner().invoke(app, args)
        assert refused.exit_code == 2, refused.output
        assert "needs its own key" in refused.output and "--judge-api-key" in refused.output
        assert candidate.calls() == 0

        result = CliRunner().invoke(app, [*args, "--judge-api-key", "candidate-key-777"])
        assert result.exit_code == 0, result.output
        assert candidate.calls() > 0
        sent = {r.headers.get("Authorization") or r.headers.get("authorization") for r in candidate.requests}
        assert sent == {"Bearer candidate-key-777"}
        assert shadow_env.calls() == production_calls  # the production judge was not asked either

        # the same through the environment, the flow called directly (as a deployment's run would be)
        monkeypatch.setenv("JUDGEFLOW_SHADOW_JUDGE_API_BASE", candidate.url)
        monkeypatch.setenv("JUDGEFLOW_SHADOW_JUDGE_API_KEY", "candidate-key-888")
        before = candidate.calls()
        shadow_score(since=datetime.now(timezone.utc) - timedelta(days=2), judge_model="openai/judge-b",
                     metrics=["toxicity"], segment_by="app", seed="env")
        assert candidate.calls() > before
        sent = {r.headers.get("Authorization") or r.headers.get("authorization") for r in candidate.requests[before:]}
        assert sent == {"Bearer candidate-key-888"}
    assert all(production_key not in str(r.headers) for r in candidate.requests)

    # neither the candidate's base nor a key is a parameter Prefect stores
    stored = _shadow_flow_parameters()
    assert stored and all("judge_model" in p for p in stored)
    for parameters in stored:
        text = str(parameters)
        assert candidate.url not in text and str(candidate.port) not in text and "candidate-key" not in text


def test_the_production_key_goes_only_to_the_production_endpoint(shadow_env, monkeypatch):
    from judgeflow.errors import ConfigError
    from judgeflow.config.settings import load_settings
    from judgeflow.shadow.plan import candidate_settings

    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", "sk-production-key-4242")
    same = candidate_settings(load_settings(), "openai/judge-b")
    assert same.judge_api_key.get_secret_value() == "sk-production-key-4242"  # same base: same account
    assert same.judge_api_base.get_secret_value() == shadow_env.url
    monkeypatch.setenv("JUDGEFLOW_SHADOW_JUDGE_API_BASE", "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="needs its own key"):
        candidate_settings(load_settings(), "openai/judge-b")
    # no base at all, another provider: the production key is not handed to it (litellm uses that provider's own)
    monkeypatch.delenv("JUDGEFLOW_SHADOW_JUDGE_API_BASE")
    monkeypatch.delenv("JUDGEFLOW_JUDGE_API_BASE")
    other = candidate_settings(load_settings(), "anthropic/claude-candidate")
    assert other.judge_api_key is None and other.judge_api_base is None
