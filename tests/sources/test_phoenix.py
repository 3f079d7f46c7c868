"""The ``phoenix`` source preset over a real Phoenix server on the test PostgreSQL, fed by a
real OpenInference-instrumented OpenAI client (tests/support/phoenix.py). Slow: Phoenix's
venv takes minutes to install the first time and the server ~10-30 s to start
(``./scripts/test --slow``)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from judgeflow.sources.phoenix import PhoenixSource
from judgeflow.sources.trace_source import KeyFilter, TraceKey

pytestmark = pytest.mark.slow

SOURCE = PhoenixSource()


@pytest.fixture(scope="module")
def phoenix(pg_server, tmp_path_factory):
    """(Phoenix server, sqlalchemy URL of its database, {scenario: trace id})."""
    from tests.support.phoenix import phoenix_with_traces

    with phoenix_with_traces(pg_server, tmp_path_factory.mktemp("phoenix")) as running:
        yield running


def _keys(conn, f: KeyFilter = KeyFilter()) -> list[TraceKey]:
    sql, params = SOURCE.keys_sql(f)
    return [TraceKey(*row) for row in conn.execute(text(sql), {**params, "limit": 1000}).all()]


def test_llm_spans_become_traces_with_their_traces_retrieved_documents(phoenix):
    _, url, sent = phoenix
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            keys = _keys(conn)
            bodies = SOURCE.bodies(conn, keys)
    finally:
        engine.dispose()
    assert len(keys) == len(sent) == len(bodies)
    assert [k.created_at for k in keys] == sorted(k.created_at for k in keys)
    by_trace = {b.metadata["trace_id"]: b for b in bodies.values()}
    body = {name: by_trace[ids["trace_id"]] for name, ids in sent.items()}

    grounded = body["grounded"]
    assert grounded.input == "What is the capital of France? reply: Paris is the capital of France."  # no system prompt
    assert grounded.output == "Paris is the capital of France."
    assert grounded.context == ["Paris is the capital and largest city of France.", "France is in Western Europe."]
    assert grounded.metadata["project"] == "rag-app" and grounded.metadata["model"] == "app-model"
    assert body["ungrounded"].context == ["The Eiffel Tower is 330 metres tall."]
    assert body["ungrounded"].output == "It is 500 metres tall [halluc=0.75]."
    assert body["two_retrievals"].context == ["Berlin is the capital of Germany.", "Germany borders France."]
    toxic = body["toxic"]
    assert toxic.output == "You are an idiot [toxic]. It ships today." and toxic.context is None
    assert toxic.metadata["project"] == "chat-app"
    assert body["failure"].skip.startswith("the LLM call failed (span status ERROR")
    assert body["tool_call"].skip == "the reply is a tool call (get_weather) with no text to judge"
    assert all(b.skip is None for n, b in body.items() if n not in ("failure", "tool_call"))


def test_db_check_asks_for_the_llm_span_index_and_then_reads_keys_from_it_alone(phoenix):
    _, url, _ = phoenix
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            lines = SOURCE.check(conn)
        assert [level for level, _ in lines] == ["ok", "note", "ok"], lines  # a choice, not a fault
        create = lines[1][1].split("for index-only reads: ", 1)[1]
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text(create))
            conn.execute(text("VACUUM ANALYZE spans"))
        with engine.connect() as conn:
            lines = SOURCE.check(conn)
            assert [level for level, _ in lines] == ["ok", "ok", "ok"], lines
            # On a handful of spans the planner's choice among seq, bitmap, index and index-only
            # scans is a coin toss (bench/presets.py shows index-only at 1M spans). With every other
            # access path off, an index-only scan of the key index is what is left only if that
            # index covers the query: the property checked here.
            for path in ("seqscan", "bitmapscan", "indexscan"):
                conn.execute(text(f"SET enable_{path} = off"))
            sql, params = SOURCE.keys_sql(KeyFilter(lo=_keys(conn)[0].created_at))
            plan = "\n".join(conn.execute(text("EXPLAIN " + sql), {**params, "limit": 10}).scalars())
            assert "Index Only Scan using judgeflow_llm_spans_start_time_span_id_idx" in plan, plan
    finally:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("DROP INDEX IF EXISTS judgeflow_llm_spans_start_time_span_id_idx"))
        engine.dispose()


def test_scores_written_back_as_span_annotations_once_and_updated_by_a_rescore(phoenix, database_url):
    """The write-back over results stored in judgeflow's table: one annotation per span
    and metric, a re-score updates it, a span Phoenix no longer holds fails alone."""
    import httpx

    from judgeflow.db import migrate
    from judgeflow.config.settings import Settings
    from judgeflow.tasks.phoenix_write_back import write_scores_to_phoenix

    server, url, sent = phoenix
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            spans = {b.metadata["trace_id"]: b.id for b in SOURCE.bodies(conn, _keys(conn)).values()}
    finally:
        engine.dispose()
    toxic, grounded = spans[sent["toxic"]["trace_id"]], spans[sent["grounded"]["trace_id"]]
    results = create_engine(database_url)
    migrate.upgrade(results)

    def store(rows):
        with results.begin() as conn:
            for trace_id, metric, score, passed in rows:
                conn.execute(text(
                    "INSERT INTO judgeflow.eval_results AS r (trace_id, metric, status, score, passed, threshold, "
                    "reason, judge_model, metric_version, flow_run_id, source) VALUES (:t, :m, 'scored', :s, :p, 0.5, "
                    ":r, 'judge', '3', 'run-1', 'phoenix:spans@results-db') ON CONFLICT (trace_id, metric) DO UPDATE "
                    "SET score = excluded.score, passed = excluded.passed, reason = excluded.reason, "
                    "scored_at = clock_timestamp()"), {"t": trace_id, "m": metric, "s": score, "p": passed,
                                                      "r": f"{metric} {score}"})

    settings = Settings(database_url=database_url, source="phoenix", phoenix_write_back=True, phoenix_url=server.url)
    store([(toxic, "toxicity", 1.0, False), (grounded, "toxicity", 0.0, True), (grounded, "hallucination", 0.0, True)])
    first = write_scores_to_phoenix.fn(settings)
    store([(toxic, "toxicity", 0.5, True),  # a re-score
           ("0000000000000000", "toxicity", 1.0, False)])  # a span Phoenix does not hold
    second = write_scores_to_phoenix.fn(settings)
    results.dispose()
    assert (first.written, first.failed) == (3, 0)
    assert (second.written, second.failed, second.left) == (1, 1, 1) and "0000000000000000" in second.errors[0]

    def annotations(project, span_id):
        reply = httpx.get(f"{server.url}/v1/projects/{project}/span_annotations", params={"span_ids": [span_id]})
        reply.raise_for_status()
        return reply.json()["data"]

    on_toxic = annotations("chat-app", toxic)
    assert [(a["name"], a["identifier"], a["result"]["label"], a["result"]["score"]) for a in on_toxic] == [
        ("judgeflow.toxicity", "judgeflow", "pass", 0.5)]  # updated in place, not duplicated
    assert on_toxic[0]["result"]["explanation"] == "toxicity 0.5" and on_toxic[0]["annotator_kind"] == "LLM"
    assert sorted(a["name"] for a in annotations("rag-app", grounded)) == ["judgeflow.hallucination", "judgeflow.toxicity"]


def test_a_wrong_prefix_is_caught_by_db_check_stops_the_write_back_and_show_takes_the_trace_id(
        phoenix, database_url):
    """Against the real Phoenix: `http://host:port/v1` (what Phoenix's banner calls its REST
    API) answers reads with its web page, so `db check` refuses it, and a POST there with 405,
    which stops the write-back after one request, naming no path. A span Phoenix does not
    hold is named in its refusal and fails alone. `show` takes the Phoenix trace id or any
    span id of the trace."""
    from judgeflow.config.settings import Settings
    from judgeflow.db import migrate
    from judgeflow.db.trace_results import look_up, render_lookup
    from judgeflow.phoenix.annotations import check_access
    from judgeflow.phoenix.outbox import sync_phoenix
    from judgeflow.sources.identity import result_source

    server, url, sent = phoenix
    level, message = check_access(server.url + "/v1", None)
    assert level == "MISSING" and "with a web page, not the API's JSON" in message, message
    level, message = check_access(server.url, None)
    assert level == "ok" and "takes annotations" in message, message

    settings = Settings(_env_file=None, database_url=database_url, source="phoenix", source_database_url=url,
                        phoenix_write_back=True, phoenix_url=server.url)
    source = result_source(settings)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            trace_rowid, llm_span = conn.execute(text(
                "SELECT s.trace_rowid, s.span_id FROM spans s JOIN traces t ON t.id = s.trace_rowid "
                "WHERE t.trace_id = :t AND s.span_kind = 'LLM'"), {"t": sent["grounded"]["trace_id"]}).one()
            other_span = conn.execute(text(
                "SELECT span_id FROM spans WHERE trace_rowid = :r AND span_kind <> 'LLM' LIMIT 1"),
                {"r": trace_rowid}).scalar_one()
    finally:
        engine.dispose()
    results = create_engine(database_url)
    migrate.upgrade(results)
    with results.begin() as conn:
        for span in (llm_span, "0000000000000001"):
            conn.execute(text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, reason, "
                "judge_model, metric_version, source) VALUES (:t, 'toxicity', 'scored', 0.0, true, 0.5, 'fine', "
                "'judge', '3', :s)"), {"t": span, "s": source})
    try:
        stopped = sync_phoenix(results, source, server.url + "/v1", None)
        assert stopped.request_refused and (stopped.written, stopped.failed, stopped.left) == (0, 0, 2)
        assert f"Phoenix at {server.url} refused the annotation request itself (HTTP 405)" in stopped.note
        written = sync_phoenix(results, source, server.url, None)
        assert (written.written, written.failed) == (1, 1)
        assert written.errors == ["Phoenix no longer holds span 0000000000000001 (HTTP 404)"]
    finally:
        results.dispose()

    for some_id in (sent["grounded"]["trace_id"], other_span):
        found = look_up(settings, some_id)
        assert found.phoenix_trace_id == sent["grounded"]["trace_id"]
        assert [v.trace_id for v in found.views] == [llm_span]
        shown = render_lookup(found, ui_url=None, source_name="spans")
        assert f"LLM span {llm_span}" in shown and "toxicity: score 0.000, passed" in shown
        assert "in Phoenix: written as a span annotation" in shown
