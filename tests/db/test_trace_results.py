"""`judgeflow show TRACE_ID` (judgeflow/db/trace_results.py): a scored, a
failed, a reused and an unknown trace, after real runs of the scoring flow."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from tests.support.traces import BASE_TIME, insert_traces, results, scripted_trace

runner = CliRunner()


def test_show_a_scored_a_failed_a_reused_and_an_unknown_trace(judgeflow_env, db, prefect_server, judge_server):
    row, expected = scripted_trace(0)  # one toxic opinion of two: toxicity 0.5
    original = {**row, "id": "t-scored"}
    twin = {**row, "id": "t-twin", "created_at": BASE_TIME + timedelta(hours=1)}
    failing = {"id": "t-failed", "created_at": BASE_TIME + timedelta(hours=2),
               "output": "The judge refuses this one [judge-fail:400]."}
    insert_traces(db, [original, twin, failing])
    assert runner.invoke(app, ["score", "--no-alerts", "--limit", "1"]).exit_code == 0  # the original first
    assert runner.invoke(app, ["score", "--no-alerts"]).exit_code == 0
    stored = results(db)
    api_url = str(prefect_server).rstrip("/")
    assert api_url.endswith("/api")
    ui = api_url[: -len("/api")]

    shown = runner.invoke(app, ["show", "t-scored"])
    assert shown.exit_code == 0, shown.output
    tox = stored[("t-scored", "toxicity")]
    assert tox["score"] == expected["toxicity"] and tox["status"] == "scored"
    assert "trace t-scored" in shown.stdout
    assert "toxicity: score 0.500, passed (threshold 0.5)" in shown.stdout
    assert f"reason: {' '.join(tox['reason'].split())[:60]}" in shown.stdout
    assert "verdict yes: You are clueless [toxic] - The opinion is marked [toxic]." in shown.stdout
    assert "verdict no: The rest of trace 0 is fine" in shown.stdout
    with db.connect() as conn:  # the judge epoch the result belongs to (judgeflow/db/epochs.py)
        [epoch_start] = conn.execute(sa.text(
            "SELECT started_at FROM judgeflow.judge_epochs WHERE metric = 'toxicity' AND metric_version = :v "
            "AND started_at <= :at ORDER BY started_at DESC, id DESC LIMIT 1"),
            {"v": tox["metric_version"], "at": tox["scored_at"]}).scalars()
    assert (f"judge: {tox['judge_model']}, metric version {tox['metric_version']}; "
            f"judge epoch since {epoch_start:%Y-%m-%d %H:%M:%S} UTC") in shown.stdout
    cost = "unknown" if tox["cost_usd"] is None else f"${tox['cost_usd']:.6f}"  # the test model has no price
    assert f"cost: {cost}, {tox['judge_calls']} judge call(s)" in shown.stdout
    assert tox["judge_calls"] == 3
    # the prompt tokens the judge's cache served, of the pair's three calls (the column of 18_cached_tokens.py)
    assert (f"{tox['prompt_tokens']}/{tox['completion_tokens']} tokens (prompt/completion), "
            f"{tox['cached_tokens']} of the prompt's from the provider's cache") in shown.stdout
    run = tox["flow_run_id"]
    assert f"by flow run {run}  {ui}/runs/flow-run/{run}" in shown.stdout
    assert "reused" not in shown.stdout
    hal = stored[("t-scored", "hallucination")]
    assert f"hallucination: score {hal['score']:.3f}" in shown.stdout

    shown = runner.invoke(app, ["show", "t-twin"])
    assert shown.exit_code == 0, shown.output
    copy = stored[("t-twin", "toxicity")]
    assert copy["details"]["reused_from"] == "t-scored" and copy["judge_calls"] == 0
    assert shown.stdout.count("reused: copied from identical trace t-scored (no judge call)") == 2
    assert "cost: $0.000000, 0 judge call(s)" in shown.stdout
    assert copy["flow_run_id"] != run and f"by flow run {copy['flow_run_id']}" in shown.stdout

    shown = runner.invoke(app, ["show", "t-failed"])
    assert shown.exit_code == 0, shown.output
    failed = stored[("t-failed", "toxicity")]
    assert failed["status"] == "failed"
    assert f"toxicity: scoring failed ({failed['error_kind']}) after {failed['attempts']} attempt(s)" in shown.stdout
    assert "judge-fail:400" in shown.stdout  # the error, from the judge's reply

    shown = runner.invoke(app, ["show", "no-such-trace"])
    assert shown.exit_code == 1
    assert "judgeflow: no trace 'no-such-trace'" in shown.output and "llm_traces has no such id" in shown.output


def test_show_a_trace_not_scored_yet_or_being_scored(judgeflow_env, db):
    from judgeflow.db import migrate
    from judgeflow.config.settings import load_settings
    from judgeflow.db.leases import LeaseKeeper
    from judgeflow.tasks.claims import claim_traces

    insert_traces(db, [scripted_trace(i)[0] for i in range(2)])
    migrate.upgrade(db)
    shown = runner.invoke(app, ["show", "tr-0001"])
    assert shown.exit_code == 0, shown.output
    assert "in llm_traces, not scored yet" in shown.stdout
    assert "toxicity: no result yet (pending)" in shown.stdout

    settings = load_settings()
    with LeaseKeeper(settings, "run-live:1") as keeper:
        claim_traces.fn(settings, "run-live:1", ["toxicity"], 1, owner_key=keeper.owner_key)
        with db.connect() as conn:
            [claimed] = conn.execute(sa.text("SELECT trace_id FROM judgeflow.claims")).scalars()
        shown = runner.invoke(app, ["show", claimed])
    assert "toxicity: no result yet, being scored now by flow run run-live" in shown.stdout
    assert "hallucination: no result yet (pending)" in shown.stdout


ESCAPES = "\x1b]0;owned\x07\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\\x1b[2J\x1b[1A\x9b31m\r"


def test_show_prints_no_control_sequence_the_judge_wrote(judgeflow_env, db, prefect_server, judge_server):
    """The test judge repeats the output's sentences as its opinions: a trace whose output holds OSC,
    CSI and C1 sequences gets a judge reply holding them, stored as the verdicts' opinions."""
    import os
    import subprocess
    import sys

    insert_traces(db, [{"id": "t-esc", "output": f"You are clueless {ESCAPES} [toxic]. The rest is fine."}])
    assert runner.invoke(app, ["score", "--no-alerts"]).exit_code == 0
    with db.connect() as conn:
        details = conn.execute(sa.text(
            "SELECT details FROM judgeflow.eval_results WHERE trace_id = 't-esc' AND metric = 'toxicity'"
        )).scalar_one()
    assert any("\x1b]0;owned" in v["opinion"] for v in details["verdicts"])  # the judge's text holds them

    shown = subprocess.run([sys.executable, "-m", "judgeflow", "show", "t-esc"], capture_output=True,
                           env=dict(os.environ), timeout=300)
    assert shown.returncode == 0, shown.stderr.decode()
    out = shown.stdout.decode("utf-8") + shown.stderr.decode("utf-8")
    assert "You are clueless ␛]0;owned␇" in out  # shown, visibly
    assert not [c for c in out if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_show_against_a_missing_source_table_says_so_in_one_line(judgeflow_env, db, monkeypatch):
    import os
    import subprocess
    import sys

    from tests.support.traces import create_source

    create_source(db)  # the default source exists; the configured one below does not
    monkeypatch.setenv("JUDGEFLOW_TRACES_TABLE", "public.no_such_traces")
    shown = subprocess.run([sys.executable, "-m", "judgeflow", "show", "t-1"], capture_output=True, text=True,
                           env=dict(os.environ), timeout=300)
    assert shown.returncode == 2, shown.stderr
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert "no_such_traces" in lines[0] and "does not exist" in lines[0]
    assert "in time" not in lines[0]


def test_show_an_id_that_is_not_text_is_one_line(judgeflow_env, db):
    import os
    import subprocess
    import sys

    from tests.support.traces import create_source

    create_source(db)
    shown = subprocess.run([sys.executable, "-m", "judgeflow", "show", os.fsdecode(b"t-\xff")], capture_output=True,
                           text=True, env=dict(os.environ), timeout=300)
    assert shown.returncode == 2, shown.stderr
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1 and "not UTF-8" in lines[0] and "Traceback" not in shown.stderr, shown.stderr


def test_show_names_a_spans_phoenix_trace_and_project_and_takes_its_id_in_upper_case(judgeflow_env, db, monkeypatch):
    """Phoenix's three tables as the preset reads them (their real shape is tests/sources/test_phoenix.py's,
    behind --slow): a span judgeflow scored, then deleted from Phoenix."""
    from judgeflow.config.settings import load_settings
    from judgeflow.db import migrate
    from judgeflow.db.result_sources import adopt_configured_source
    from judgeflow.db.trace_results import look_up, render_lookup

    span, trace = "a1b2c3d4e5f60718", "0af7651916cd43dd8448eb211c80319c"
    monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
    monkeypatch.setenv("JUDGEFLOW_SOURCE_SCHEMA", "px")
    settings = load_settings()
    migrate.upgrade(db)
    source = adopt_configured_source(db, settings).source
    with db.begin() as conn:
        for sql in ("CREATE SCHEMA px", "CREATE TABLE px.projects (id int PRIMARY KEY, name text)",
                    "CREATE TABLE px.traces (id int PRIMARY KEY, trace_id text, project_rowid int)",
                    "CREATE TABLE px.spans (id int PRIMARY KEY, span_id text, trace_rowid int, span_kind text)",
                    "INSERT INTO px.projects VALUES (1, 'support-bot')",
                    f"INSERT INTO px.traces VALUES (7, '{trace}', 1)",
                    f"INSERT INTO px.spans VALUES (70, '{span}', 7, 'LLM')"):
            conn.execute(sa.text(sql))
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, reason, "
            "judge_model, metric_version, source) VALUES (:t, 'toxicity', 'scored', 0.0, true, 0.5, 'fine', "
            "'judge', '3', :s)"), {"t": span, "s": source})

    found = look_up(settings, span.upper())
    assert [v.trace_id for v in found.views] == [span]
    text = render_lookup(found, ui_url=None, source_name="px.spans")
    assert text.splitlines()[:2] == [f"trace {span}", f"  in Phoenix: trace {trace}, project support-bot"]
    assert text.splitlines()[2].startswith("  toxicity: score 0.000, ")  # the result, found under the typed id
    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM px.spans"))
    gone = render_lookup(look_up(settings, span), ui_url=None, source_name="px.spans")
    assert gone.splitlines()[1] == "  in Phoenix: no longer held (its retention, or a user, deleted the span)"
    # an id that is not hex is taken as typed
    assert look_up(settings, "NOT-HEX").views[0].trace_id == "NOT-HEX"
