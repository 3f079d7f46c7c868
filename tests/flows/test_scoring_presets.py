"""The scoring flow over source presets: LiteLLM's spend logs (made by LiteLLM's own
migrations and get_logging_payload, tests/support/litellm_proxy.py) read in place from a
database of their own, scored exactly once, with the preset's segments and skips."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from tests.support.litellm_fixtures import by_scenario
from tests.support.litellm_proxy import insert_spend_logs
from tests.support.traces import first_step_calls, results

SKIPPED = {
    "tool_call": "the reply is a tool call (get_weather) with no text to judge",
    "empty": "the reply is empty: no text to judge",
}


@pytest.fixture
def litellm_env(prefect_server, judgeflow_env, litellm_db, monkeypatch):
    url, conninfo = litellm_db
    monkeypatch.setenv("JUDGEFLOW_SOURCE", "litellm")
    monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", url)
    return conninfo


def test_spend_logs_are_scored_once_with_their_segments_and_skips(litellm_env, db, judge_server, spend_log_rows):
    import psycopg

    rows = by_scenario(spend_log_rows)
    single = rows["single"][0]
    with psycopg.connect(litellm_env, autocommit=True) as pg:
        # a partitioned spend-log table is keyed by (request_id, "startTime"): an id can repeat
        pg.execute('ALTER TABLE "LiteLLM_SpendLogs" DROP CONSTRAINT "LiteLLM_SpendLogs_pkey"')
    later = dict(single, startTime=(datetime.fromisoformat(single["startTime"]) + timedelta(seconds=1)).isoformat(),
                 response=json.dumps({"choices": [{"message": {"content": "A later copy [toxic]."}}]}))
    malformed = dict(single, request_id="chatcmpl-malformed", response=json.dumps({"choices": "none"}))
    extra = [later, malformed]
    assert insert_spend_logs(litellm_env, spend_log_rows + extra) == len(spend_log_rows) + len(extra)

    summary = score_new_traces(evaluate_alerts=False)

    stored = results(db)
    assert len(stored) == 2 * (len(spend_log_rows) + 1)  # the repeated id once
    assert stored[("chatcmpl-malformed", "toxicity")]["reason"] == (
        "malformed LiteLLM spend-log row: the response has no choices")
    judged = {output for output, _ in first_step_calls(judge_server)}
    assert "Paris is the capital of France." in judged and "A later copy [toxic]." not in judged
    for name in ("single", "multi_turn", "streamed", "image"):
        request_id = rows[name][0]["request_id"]
        for metric in ("toxicity", "hallucination"):
            assert stored[(request_id, metric)]["status"] == "scored", (name, metric, stored[(request_id, metric)])
    multi = rows["multi_turn"][0]["request_id"]
    assert stored[(multi, "toxicity")]["score"] > 0  # "You are an idiot [toxic]."
    assert stored[(multi, "toxicity")]["segment"] == {
        "model": "app-model", "model_group": "app-model", "team_id": "team-b", "end_user": "bob", "tags": "prod"}
    assert stored[(rows["streamed"][0]["request_id"], "hallucination")]["score"] > 0  # the streamed reply, whole
    for name, reason in SKIPPED.items():
        got = stored[(rows[name][0]["request_id"], "toxicity")]
        assert (got["status"], got["reason"], got["judge_calls"]) == ("skipped", reason, 0)
    failure = stored[(rows["failure"][0]["request_id"], "hallucination")]
    assert failure["status"] == "skipped" and failure["reason"].startswith("the call failed at the proxy")
    original, hit = rows["cached"]
    assert stored[(original["request_id"], "toxicity")]["status"] == "scored"
    assert stored[(hit["request_id"], "toxicity")]["reason"].startswith(
        f"a cache hit: the proxy served the reply of request {original['request_id']} again")
    assert "store_prompts_in_spend_logs" in stored[(rows["unstored"][0]["request_id"], "toxicity")]["reason"]
    # each judged reply reached the judge once per metric
    assert set(first_step_calls(judge_server).values()) == {1}
    assert summary.scored == 10 and summary.failed == 0

    requests = len(judge_server.requests)
    again = score_new_traces(evaluate_alerts=False)
    assert len(judge_server.requests) == requests and again.scored == 0  # nothing is scored twice
    assert results(db) == stored


def _many(spend_log_rows: list[dict], n: int) -> list[dict]:
    """``n`` distinct calls shaped like LiteLLM's own rows (copies of its multi-turn row,
    each a second apart, with its own id and reply), plus a malformed and a repeated one."""
    base = by_scenario(spend_log_rows)["multi_turn"][0]
    start = datetime.fromisoformat(base["startTime"])
    out = []
    for i in range(n):
        response = json.loads(base["response"])
        response["choices"][0]["message"]["content"] = f"Reply number {i}. It ships today."
        out.append(dict(base, request_id=f"chatcmpl-many-{i:03d}", response=json.dumps(response),
                        startTime=(start + timedelta(seconds=i)).isoformat()))
    out.append(dict(base, request_id="chatcmpl-malformed", proxy_server_request=json.dumps({"messages": 42}),
                    startTime=(start + timedelta(seconds=n)).isoformat()))
    return out


@pytest.mark.slow  # two `judgeflow score` processes: 3-4 min on a busy 2-core machine
def test_two_runs_at_once_score_each_call_once(litellm_env, judgeflow_env, prefect_server, db, judge_server,
                                              spend_log_rows):
    judge_server.latency_mean_s = 0.05
    rows = _many(spend_log_rows, 40)
    assert insert_spend_logs(litellm_env, rows) == len(rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env, PREFECT_API_URL=prefect_server, JUDGEFLOW_SOURCE="litellm",
               JUDGEFLOW_SOURCE_DATABASE_URL=os.environ["JUDGEFLOW_SOURCE_DATABASE_URL"])
    procs = [subprocess.Popen([sys.executable, "-m", "judgeflow.cli", "score", "--batch-size", "10",
                               "--max-concurrency", "4"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]

    assert [p.returncode for p in procs] == [0, 0], outputs
    stored = results(db)
    assert len(stored) == 2 * len(rows)
    assert stored[("chatcmpl-malformed", "toxicity")]["status"] == "skipped"
    assert stored[("chatcmpl-malformed", "toxicity")]["reason"] == (
        "malformed LiteLLM spend-log row: messages is a int, not a list")
    calls = first_step_calls(judge_server)
    assert len(calls) == 80 and set(calls.values()) == {1}, "a (call, metric) reached the judge twice"
    assert all(r["segment"].get("team_id") == "team-b" for r in stored.values())
    per_run = collections.Counter(r["flow_run_id"] for r in stored.values())
    assert len(per_run) == 2 and min(per_run.values()) > 0, per_run


@pytest.mark.slow  # a real Phoenix server (tests/support/phoenix.py)
def test_phoenix_llm_spans_scored_against_their_own_retrieved_documents_and_written_back(
        prefect_server, judgeflow_env, db, judge_server, pg_server, tmp_path, monkeypatch):
    import httpx

    from tests.support.phoenix import phoenix_with_traces

    with phoenix_with_traces(pg_server, tmp_path / "phoenix") as (server, url, sent):
        monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
        monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", url)
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_WRITE_BACK", "true")
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", server.url)
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            span_of = dict(conn.execute(sa.text(
                "SELECT t.trace_id, s.span_id FROM spans s JOIN traces t ON t.id = s.trace_rowid "
                "WHERE s.span_kind = 'LLM'")).all())
        engine.dispose()
        span = {name: span_of[ids["trace_id"]] for name, ids in sent.items()}

        summary = score_new_traces(evaluate_alerts=False)

        stored = results(db)
        assert len(stored) == 2 * len(sent)
        grounded = stored[(span["grounded"], "hallucination")]
        assert grounded["status"] == "scored" and grounded["score"] == 0 and grounded["details"]["context_used"]
        judged = [r.data for r in judge_server.requests if r.step == "HallucinationJudgement"]
        contexts = {d["output"]: d.get("context") for d in judged}
        assert contexts["Paris is the capital of France."] == [
            "Paris is the capital and largest city of France.", "France is in Western Europe."]
        assert contexts["Berlin is the capital of Germany."] == [
            "Berlin is the capital of Germany.", "Germany borders France."]
        assert stored[(span["ungrounded"], "hallucination")]["score"] > 0
        toxic = stored[(span["toxic"], "toxicity")]
        assert toxic["score"] > 0 and toxic["segment"] == {"project": "chat-app"}
        assert stored[(span["grounded"], "toxicity")]["segment"] == {"project": "rag-app"}
        assert stored[(span["failure"], "toxicity")]["status"] == "skipped"
        assert stored[(span["tool_call"], "hallucination")]["reason"] == (
            "the reply is a tool call (get_weather) with no text to judge")
        assert summary.scored == 8
        assert any("8 score(s) written as span annotations" in n for n in summary.notes), summary.notes

        def annotations(project, span_id):
            reply = httpx.get(f"{server.url}/v1/projects/{project}/span_annotations", params={"span_ids": [span_id]})
            reply.raise_for_status()
            return sorted((a["name"], a["result"]["label"]) for a in reply.json()["data"])

        label = {m: "pass" if stored[(span["toxic"], m)]["passed"] else "fail" for m in ("toxicity", "hallucination")}
        expected = [("judgeflow.hallucination", label["hallucination"]), ("judgeflow.toxicity", label["toxicity"])]
        assert annotations("chat-app", span["toxic"]) == expected
        assert annotations("chat-app", span["tool_call"]) == []  # skipped: nothing to annotate
        requests = len(judge_server.requests)
        again = score_new_traces(evaluate_alerts=False)
        assert len(judge_server.requests) == requests and again.scored == 0
        # a second write-back finds nothing unwritten: no annotation is added or changed
        from judgeflow.config.settings import load_settings
        from judgeflow.tasks.phoenix_write_back import write_scores_to_phoenix

        assert write_scores_to_phoenix.fn(load_settings(), summary.flow_run_id).written == 0  # nothing unwritten
        assert annotations("chat-app", span["toxic"]) == expected


def test_show_and_the_run_name_the_preset_not_the_table(litellm_env, db, judge_server, spend_log_rows, capsys):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    assert insert_spend_logs(litellm_env, spend_log_rows[:1]) == 1
    unknown = CliRunner().invoke(app, ["show", "no-such-call"])
    assert unknown.exit_code == 1 and "LiteLLM_SpendLogs has no such id" in unknown.output, unknown.output
    nothing = CliRunner().invoke(app, ["score", "--since", "2999-01-01"])
    assert "pending in LiteLLM_SpendLogs" in nothing.output, nothing.output
