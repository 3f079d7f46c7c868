"""The Phoenix write-back against a real Phoenix (tests/support/phoenix.py): turned on
after the scores exist, it writes them without judging again; with Phoenix stopped a
run's scores wait unwritten (status counts them, db check says Phoenix does not answer),
and once Phoenix is back the next run, or `judgeflow phoenix sync`, writes them. Slow:
Phoenix's venv and server (``./scripts/test --slow``)."""

from __future__ import annotations

import time

import httpx
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

pytestmark = pytest.mark.slow
runner = CliRunner()


def _annotations(server, span_ids: list[str]) -> list[tuple[str, str]]:
    """(span, annotation name) of judgeflow's annotations on ``span_ids``, over every project."""
    found = []
    for project in ("chat-app", "rag-app", "default"):
        reply = httpx.get(f"{server.url}/v1/projects/{project}/span_annotations", params={"span_ids": span_ids})
        if reply.status_code == 404:  # a project that has no spans
            continue
        reply.raise_for_status()
        found += [(a["span_id"], a["name"]) for a in reply.json()["data"] if a["identifier"] == "judgeflow"]
    return sorted(found)


def _scored(db) -> list[str]:
    """The span of each scored result."""
    with db.connect() as conn:
        return list(conn.execute(sa.text("SELECT trace_id FROM judgeflow.eval_results WHERE status = 'scored'"))
                    .scalars())


def _unwritten(settings) -> int:
    from judgeflow.status.work import work_status

    return work_status(settings)["phoenix_write_back"]["unwritten"]


def test_write_back_turned_on_later_then_phoenix_stopped_and_started_again(
        prefect_server, judgeflow_env, db, judge_server, pg_server, tmp_path, monkeypatch):
    from judgeflow.cli import app
    from judgeflow.flows.scoring import score_new_traces
    from judgeflow.config.settings import load_settings
    from tests.support.judge_server import JudgeServer
    from tests.support.litellm_proxy import app_responder
    from tests.support.phoenix import ensure_venv, phoenix_with_traces, send_traces

    with phoenix_with_traces(pg_server, tmp_path / "phoenix") as (server, url, sent):
        monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
        monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", url)
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", server.url)
        first = score_new_traces(evaluate_alerts=False)  # the write-back is off
        scored = _scored(db)
        assert first.scored == len(scored) == 8 and _annotations(server, sorted(set(scored))) == []
        assert _unwritten(load_settings()) == 8

        # turned on after the scores exist: the next `judgeflow score` writes them, judging nothing
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_WRITE_BACK", "true")
        calls = len(judge_server.requests)
        later = runner.invoke(app, ["score", "--no-alerts"])
        assert later.exit_code == 0, later.output
        assert "nothing to score" in later.stdout and "8 score(s) written as span annotations" in later.stdout
        assert len(judge_server.requests) == calls
        assert len(_annotations(server, sorted(set(scored)))) == 8 and _unwritten(load_settings()) == 0

        # new calls arrive, and Phoenix is stopped before the run that scores them
        with JudgeServer(app_responder) as llm_app:
            send_traces(ensure_venv(), server.collector, llm_app.url, only=["toxic", "grounded"])
        engine = sa.create_engine(url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.execute(sa.text("SELECT count(*) FROM spans WHERE span_kind = 'LLM'")).scalar() >= len(sent) + 2:
                    break
            time.sleep(0.5)
        engine.dispose()
        server.stop()
        down = score_new_traces(evaluate_alerts=False)
        assert down.scored == 4, down.notes  # two new calls, two metrics
        [note] = [n for n in down.notes if "Phoenix write-back" in n]
        assert "0 score(s) written" in note and "did not answer" in note and "4 score(s) wait unwritten" in note
        assert _unwritten(load_settings()) == 4
        status = runner.invoke(app, ["status"])
        # Phoenix down is a stop: no try counted, nothing waits for a backoff
        assert ("Phoenix write-back on: 4 scored result(s) not yet written to Phoenix; `judgeflow phoenix sync` "
                "writes them now") in status.stdout
        check = runner.invoke(app, ["db", "check"])
        assert check.exit_code == 1 and "[MISSING] Phoenix write-back" in check.stdout and "does not answer" in check.stdout

        calls = len(judge_server.requests)
        server.start()  # back, on the same URL
        assert "answers Phoenix's REST API" in runner.invoke(app, ["db", "check"]).stdout
        # the toxic call's backoff has passed, the grounded one's not yet: the next run writes the due ones
        with db.begin() as conn:
            toxic = conn.execute(sa.text(
                "SELECT trace_id FROM judgeflow.eval_results WHERE written_back_at IS NULL AND status = 'scored' "
                "AND metric = 'toxicity' AND score > 0")).scalar_one()
            conn.execute(sa.text(
                "UPDATE judgeflow.eval_results SET write_back_next_at = CASE WHEN trace_id = :toxic THEN now() "
                "ELSE now() + interval '1 day' END WHERE written_back_at IS NULL AND status = 'scored'"),
                {"toxic": toxic})
        due = runner.invoke(app, ["score", "--no-alerts"])
        assert "2 score(s) written" in due.stdout and "2 score(s) wait unwritten" in due.stdout, due.stdout
        synced = runner.invoke(app, ["phoenix", "sync"])
        assert synced.exit_code == 0, synced.output
        assert "2 score(s) written as span annotations" in synced.stdout  # the two the run left
        everything = _scored(db)
        assert len(everything) == 12
        assert len(_annotations(server, sorted(set(everything)))) == 12  # each (span, metric) once, none twice
        assert _unwritten(load_settings()) == 0
        assert len(judge_server.requests) == calls  # writing back judged nothing
