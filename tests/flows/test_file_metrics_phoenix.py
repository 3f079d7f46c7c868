"""A file metric's scores are written back to Phoenix as the built-ins' are:
one span annotation named ``judgeflow.<metric>``. Slow: a real Phoenix
(tests/support/phoenix.py, ``./scripts/test --slow``)."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.slow

FILE = '''
[metrics.helpfulness]
criteria = "The reply helps the user with what they asked instead of refusing."
evaluation_steps = ["Read what the user asked.", "Decide whether the reply helps with it or refuses it."]
inputs = ["input", "output"]
'''


def test_a_file_metric_is_written_back_as_its_own_annotation(prefect_server, judgeflow_env, db, judge_server,
                                                             pg_server, tmp_path, monkeypatch):
    from judgeflow.flows.scoring import score_new_traces
    from judgeflow.run.metric_door import open_metrics
    from tests.support.phoenix import phoenix_with_traces

    path = tmp_path / "metrics.toml"
    path.write_text(FILE, encoding="utf-8")
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(path))
    try:
        with phoenix_with_traces(pg_server, tmp_path / "phoenix") as (server, url, sent):
            monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
            monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", url)
            monkeypatch.setenv("JUDGEFLOW_PHOENIX_WRITE_BACK", "true")
            monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", server.url)
            summary = score_new_traces(evaluate_alerts=False)
            with db.connect() as conn:
                scored = conn.execute(sa.text(
                    "SELECT trace_id, passed FROM judgeflow.eval_results WHERE metric = 'helpfulness' "
                    "AND status = 'scored'")).all()
            assert scored and summary.by_metric["helpfulness"]["scored"] == len(scored)
            written = {}
            for project in ("chat-app", "rag-app"):
                reply = httpx.get(f"{server.url}/v1/projects/{project}/span_annotations",
                                  params={"span_ids": [span for span, _ in scored]})
                if reply.status_code == 404:
                    continue
                reply.raise_for_status()
                written.update({a["span_id"]: (a["result"]["label"], a["result"]["score"])
                                for a in reply.json()["data"] if a["name"] == "judgeflow.helpfulness"})
            assert written == {span: ("pass" if passed else "fail", 1.0) for span, passed in scored}
    finally:
        open_metrics(None)
