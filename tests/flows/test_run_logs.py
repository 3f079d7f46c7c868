"""What of judgeflow's log reaches a flow run's logs in the Prefect API (the run's
Logs tab in the UI), read back from the real Prefect server the suite starts: its
INFO lines too, as Prefect's own flow and task run loggers' do, from a run of the
command (whose terminal stays quiet without -v) and from a flow called as a
deployment's worker calls it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from judgeflow.flows.scoring import score_new_traces
from tests.flows.test_no_secrets_leak import everything_about
from tests.support.judge_server import JudgeServer, error_reply, rule_responder
from tests.support.traces import insert_traces, scripted_trace

RUN_DONE = re.compile(r"^run done: 3 traces, 6 scored")  # judgeflow.reporting's INFO line


def test_a_deployments_flow_run_logs_judgeflows_info_lines(prefect_server, judgeflow_env, db, judge_server):
    insert_traces(db, [scripted_trace(i)[0] for i in range(3)])
    summary = score_new_traces(evaluate_alerts=False)
    _, found = everything_about(str(summary.flow_run_id))
    assert any(RUN_DONE.match(m) for m in found["log_messages"]), found["log_messages"]


def test_a_commands_flow_run_logs_judgeflows_info_lines_and_its_terminal_stays_quiet(
    prefect_server, judgeflow_env, db
):
    insert_traces(db, [scripted_trace(i)[0] for i in range(3)])
    failed_once = []

    def once_500(req):  # one transient error: judgeflow.scoring's INFO line about the pair's retry
        if not failed_once:
            failed_once.append(req)
            return error_reply(500, "boom")
        return rule_responder(req)

    with JudgeServer(once_500) as judge:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
        env.update(judgeflow_env, PREFECT_API_URL=prefect_server, JUDGEFLOW_JUDGE_API_BASE=judge.url,
                   JUDGEFLOW_JUDGE_MAX_RETRIES="0", JUDGEFLOW_TASK_RETRY_DELAY_S="0")
        env.pop("PREFECT_LOGGING_EXTRA_LOGGERS", None)  # the command sets it itself
        done = subprocess.run([sys.executable, "-m", "judgeflow", "score", "--no-alerts"], env=env,
                              cwd=os.getcwd(), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    ids = set(re.findall(r"flow-run/([0-9a-f]{8}-[0-9a-f-]{27})", done.stdout + done.stderr))
    assert len(ids) == 1, done.stdout + done.stderr
    [flow_run_id] = ids
    _, found = everything_about(flow_run_id)
    messages = found["log_messages"]
    assert any(RUN_DONE.match(m) for m in messages), messages
    assert any("retrying in" in m for m in messages), messages
    # the terminal without -v: warnings and errors only
    assert "run done:" not in done.stderr and "retrying in" not in done.stderr, done.stderr[-3000:]
