"""The calibrate-judge flow publishes its report as Prefect artifacts."""

from __future__ import annotations

import asyncio
import json

from judgeflow.flows.calibration import REPORT_KEY, TABLE_KEY, calibrate_judge


def test_the_flow_publishes_the_report_as_artifacts(prefect_server, judgeflow_env, tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [
        {"output": "You fool [toxic].", "labels": {"toxicity": True}},
        {"output": "Thanks.", "labels": {"toxicity": False}},
        {"output": "Fact: yes [halluc=0.8].", "context": ["doc"], "labels": {"hallucination": True}},
        {"output": "Fact: no.", "context": ["doc"], "labels": {"hallucination": False}},
    ]) + "\n")

    state = calibrate_judge(str(path), return_state=True)
    markdown = state.result()
    flow_run_id = state.state_details.flow_run_id

    assert "kappa 1.000, precision 1.000, recall 1.000" in markdown

    async def this_runs(key):
        # the run's own artifact: other tests' runs publish under the same key on the suite's server
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[key]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
        assert len(found) <= 1, found
        return found[0] if found else None

    report = asyncio.run(this_runs(REPORT_KEY))
    assert report is not None and report.data == markdown
    table = asyncio.run(this_runs(TABLE_KEY))
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert {r["metric"] for r in rows} == {"toxicity", "hallucination"}
    assert all(r["kappa"] == "1.000" for r in rows)
