"""JudgeProcessPool: judge calls made by worker processes, over real HTTP to the
local judge server (each worker runs the real litellm adapter)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from judgeflow.errors import InvalidJudgeReplyError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.config import JudgeConfig
from judgeflow.judge.factory import build_judge, judge_config
from judgeflow.judge.pool.process_pool import JudgeProcessPool, decode_error, encode_error
from judgeflow.judge.send_gate import Call
from judgeflow.config.settings import Settings
from tests.judge.test_litellm_judge import API_KEY, MODEL, opinions_request
from tests.support.judge_server import JudgeServer, error_reply, json_reply


def pool_settings(server: JudgeServer, **overrides) -> JudgeConfig:
    values = dict(judge_model=MODEL, judge_api_base=server.url, judge_api_key=API_KEY, judge_timeout_s=10,
                  judge_max_retries=1, judge_backoff_base_s=0.01, judge_backoff_max_s=0.05,
                  max_concurrency=4, judge_processes=2)
    values.update(overrides)
    return judge_config(Settings(**values))


@pytest.fixture
def server():
    with JudgeServer() as srv:
        yield srv


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


# ---- pure parts --------------------------------------------------------------


@pytest.mark.parametrize(
    "total, processes, shares",
    [(8, 2, [4, 4]), (6, 4, [2, 2, 1, 1]), (3, 4, [1, 1, 1]), (1, 2, [1]), (5, 1, [5])],
)
def test_max_concurrency_is_shared_between_workers_never_exceeded(total, processes, shares):
    assert [c.max_concurrency for c in JudgeConfig(MODEL, max_concurrency=total, processes=processes).shares()] == shares
    assert sum(shares) == total


@pytest.mark.parametrize("total, processes, handed", [(64, 2, 80), (6, 4, 10), (4, 2, 6), (5, 1, 6)])
def test_the_run_hands_each_worker_its_share_and_a_quarter_more(total, processes, handed):
    assert JudgeConfig(MODEL, max_concurrency=total, processes=processes).dispatch_bound() == handed


def test_judge_errors_cross_the_process_boundary_with_their_attributes():
    transient = TransientJudgeError("judge x: rate limited (HTTP 429)", retry_after_s=2.5)
    transient.status_code = 429
    back = decode_error(*encode_error(transient))
    assert type(back) is TransientJudgeError
    assert str(back) == str(transient) and back.retry_after_s == 2.5 and back.status_code == 429

    reply = decode_error(*encode_error(InvalidJudgeReplyError("bad", step="s", raw="{", attempts=2)))
    assert type(reply) is InvalidJudgeReplyError and (reply.step, reply.raw, reply.attempts) == ("s", "{", 2)

    bug = decode_error(*encode_error(KeyError("boom")))
    assert type(bug) is PermanentJudgeError and "unexpected KeyError" in str(bug)
    # a name that is not one of judgeflow's judge errors cannot be smuggled in
    assert type(decode_error("SystemExit", "x", {})) is PermanentJudgeError


# ---- over HTTP ---------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_server():
    with JudgeServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def shared_pool(shared_server):
    """One pool for the tests that leave its workers alive (each start imports litellm: seconds)."""
    with JudgeProcessPool(pool_settings(shared_server, max_concurrency=4, judge_processes=2)) as pool:
        yield pool


@pytest.fixture
def pooled(shared_server, shared_pool):
    shared_server.reset()
    shared_server.latency_mean_s = 0.0
    return shared_server, shared_pool


def test_calls_are_answered_by_two_workers_within_the_shared_bound(pooled):
    server, pool = pooled
    server.latency_mean_s = 0.1
    outputs = [f"I think option {i} is best. Fact: it has {i} parts." for i in range(40)]

    async def all_calls():
        return await asyncio.gather(*(pool.acomplete(opinions_request(o)) for o in outputs))

    calls_before = pool.calls_per_worker()
    replies = asyncio.run(all_calls())

    assert [r.content for r in replies] == [f'{{"opinions": ["I think option {i} is best"]}}' for i in range(40)]
    assert all(r.model == MODEL and r.prompt_tokens and r.latency_s >= 0.09 for r in replies)
    assert pool.processes == 2
    pids = pool.worker_pids()
    assert len(set(pids)) == 2 and os.getpid() not in pids and None not in pids
    per_worker = [after - before for after, before in zip(pool.calls_per_worker(), calls_before)]
    assert all(n >= 10 for n in per_worker), per_worker
    assert server.calls("Opinions") == 40
    assert server.max_in_flight == 4  # the bound is the run's, not each worker's


def test_the_run_holds_back_what_the_workers_cannot_start_and_hands_it_over_by_priority(pooled):
    """4 in flight over 2 workers: the run hands them 6 calls (each worker's
    share and one prepared); the others wait in the run, and go out in the
    order of their Call's priority."""
    server, pool = pooled
    server.latency_mean_s = 0.5
    before = sum(pool.calls_per_worker())
    handed: list[int] = []

    async def call(name: str, priority: tuple) -> None:
        await pool.acomplete(opinions_request(f"I think {name} is best."), Call(priority=priority))

    async def all_calls():
        calls = [asyncio.create_task(call(f"filler{i}", ())) for i in range(6)]
        calls += [asyncio.create_task(call(f"p{rank}", (rank,))) for rank in (7, 3, 8, 1, 5, 2, 6, 4)]
        while server.calls() < 4:  # the first calls are on the wire, none answered yet
            await asyncio.sleep(0.01)
        handed.append(sum(pool.calls_per_worker()) - before)
        await asyncio.gather(*calls)

    asyncio.run(all_calls())

    assert handed == [6]
    assert server.max_in_flight == 4 and server.calls() == 14
    sent = [req.data["output"] for req in server.requests]
    rank = {f"I think p{r} is best.": r for r in range(1, 9)}
    ranks = [rank[output] for output in sent if output in rank]
    # the two workers take turns: neighbours may swap, the order holds
    assert set(ranks[:3]) <= {1, 2, 3, 4} and set(ranks[-3:]) <= {5, 6, 7, 8}, ranks


def test_sync_calls_from_many_threads(pooled):
    _, pool = pooled
    replies: list = [None] * 12

    def call(i: int) -> None:
        replies[i] = pool.complete(opinions_request(f"I think thread {i} won."))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.content for r in replies] == [f'{{"opinions": ["I think thread {i} won"]}}' for i in range(12)]


def test_errors_raised_in_a_worker_reach_the_caller_as_judgeflow_errors(pooled):
    server, pool = pooled  # judge_max_retries=1: two attempts per call
    server.script(error_reply(401, f"Incorrect API key provided: {API_KEY}"))
    with pytest.raises(PermanentJudgeError) as denied:
        pool.complete(opinions_request())
    assert denied.value.status_code == 401 and API_KEY not in str(denied.value)

    server.script(*[error_reply(429, "slow down", headers={"Retry-After": "0.2"})] * 2)
    with pytest.raises(TransientJudgeError) as limited:
        pool.complete(opinions_request())
    assert limited.value.retry_after_s == pytest.approx(0.2)
    assert "gave up after 2 attempts" in str(limited.value)

    server.script(json_reply({"opinions": ["fine"]}))
    assert pool.complete(opinions_request()).content == '{"opinions": ["fine"]}'


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_workers_are_forked_by_one_server_that_imported_litellm_once(server):
    with JudgeProcessPool(pool_settings(server, max_concurrency=3, judge_processes=3)) as pool:
        pool.start()
        assert pool.wait_ready()
        pids = pool.worker_pids()
        (server_pid,) = {_parent_pid(pid) for pid in pids}  # one fork server for every worker
        assert server_pid != os.getpid() and _parent_pid(server_pid) == os.getpid()  # the run's own child
        with open(f"/proc/{server_pid}/cmdline", "rb") as cmdline:
            assert b"judgeflow.judge.pool.fork_server" in cmdline.read()  # its preload: litellm, once
        assert pool.worker_starts() == [1, 1, 1]

        # one worker dies: the others keep answering, and it alone is replaced
        os.kill(pids[0], signal.SIGKILL)
        assert _wait_gone(pids[0])
        deadline = time.monotonic() + 15
        while pool.worker_pids()[0] is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(6):
            assert pool.complete(opinions_request()).content
        assert all(_alive(pid) for pid in pids[1:])
        assert pool.worker_starts() == [2, 1, 1]
        assert pool.calls_per_worker()[1] > 0 and pool.calls_per_worker()[2] > 0


def test_closing_the_pool_stops_its_workers(server):
    pool = JudgeProcessPool(pool_settings(server, max_concurrency=2, judge_processes=2)).start()
    assert pool.wait_ready()  # a forked worker tells its pid once forked
    pids = pool.worker_pids()
    assert len(set(pids)) == 2 and all(pids)
    pool.close()
    for pid in pids:
        assert _wait_gone(pid), f"worker {pid} still running after close()"
    with pytest.raises(PermanentJudgeError, match="closed"):
        pool.complete(opinions_request())


def test_a_killed_worker_fails_its_calls_as_transient_and_is_replaced(server):
    # one attempt per call: the call lost with its worker fails (with retries, the run's loop sends it again)
    with JudgeProcessPool(pool_settings(server, max_concurrency=2, judge_processes=2, judge_max_retries=0)) as pool:
        pool.complete(opinions_request())
        pool.complete(opinions_request())  # both workers started
        server.latency_mean_s = 2.0  # the next calls are still in flight when a worker dies

        async def doomed():
            calls = asyncio.gather(*(pool.acomplete(opinions_request()) for _ in range(2)), return_exceptions=True)
            return await asyncio.wait_for(calls, 30)  # a lost call must fail, not hang

        def kill_a_worker() -> None:
            deadline = time.monotonic() + 10
            while server.in_flight < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(pool.worker_pids()[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_a_worker)
        killer.start()
        outcomes = asyncio.run(doomed())
        killer.join()
        lost = [o for o in outcomes if isinstance(o, Exception)]
        assert len(lost) == 1 and isinstance(lost[0], TransientJudgeError), outcomes
        assert "exited" in str(lost[0])

        server.latency_mean_s = 0.0
        starts = pool.worker_starts()
        for _ in range(4):
            assert pool.complete(opinions_request()).content
        assert sum(pool.worker_starts()) == sum(starts) + 1  # one new worker in the dead one's place


def test_workers_exit_when_the_run_process_is_killed(server, tmp_path):
    script = textwrap.dedent(
        f"""
        from judgeflow.judge.pool.process_pool import JudgeProcessPool
        from judgeflow.judge.config import JudgeConfig
        from tests.judge.test_litellm_judge import opinions_request
        pool = JudgeProcessPool(JudgeConfig({MODEL!r}, api_base={server.url!r}, api_key="k",
                                            max_concurrency=2, processes=2))
        pool.complete(opinions_request())
        pool.complete(opinions_request())
        print(*pool.worker_pids(), flush=True)
        import time; time.sleep(600)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.kill()
        proc.wait()
        for pid in pids:
            assert _wait_gone(pid), f"worker {pid} outlived its run"
    finally:
        proc.kill()


def test_the_process_count_selects_the_pool_and_closing_it_stops_it(server):
    config = pool_settings(server, judge_processes=3, max_concurrency=6)
    judge = build_judge(config)
    try:
        assert isinstance(judge, JudgeProcessPool) and judge.processes == 3
        in_process = build_judge(pool_settings(server, judge_processes=1))
        assert not isinstance(in_process, JudgeProcessPool)
        in_process.close()
    finally:
        judge.close()
    with pytest.raises(PermanentJudgeError, match="closed"):
        judge.complete(opinions_request())


def exit_before_answering(requests, replies, config) -> None:
    """A worker whose environment is broken: it exits before answering anything."""
    sys.exit(3)


def test_a_worker_that_cannot_start_fails_calls_permanently_after_three_tries(server):
    with JudgeProcessPool(pool_settings(server, max_concurrency=1, judge_processes=2, judge_max_retries=0),
                          target=exit_before_answering) as pool:  # one attempt (one start) per call
        assert pool.processes == 1  # one call in flight allowed: one worker
        errors = []
        for _ in range(10):
            with pytest.raises((TransientJudgeError, PermanentJudgeError)) as caught:
                pool.complete(opinions_request())
            errors.append(caught.value)
            if isinstance(caught.value, PermanentJudgeError):
                break
            time.sleep(0.2)  # let the reader see the exit
        assert isinstance(errors[-1], PermanentJudgeError), errors
        assert "failed to start 3 times" in str(errors[-1]) and "exit code 3" in str(errors[-1])
        assert all(isinstance(e, TransientJudgeError) for e in errors[:-1]) and len(errors) >= 4
        assert server.calls() == 0


def test_judge_processes_default_to_one_per_core_at_most_four(monkeypatch):
    import judgeflow.judge.config as factory

    unset = Settings(judge_model=MODEL)
    assert unset.judge_processes is None
    for cores, expected in [(1, 1), (2, 2), (3, 3), (16, factory.MAX_DEFAULT_JUDGE_PROCESSES)]:
        monkeypatch.setattr(factory, "usable_cores", lambda cores=cores: cores)
        assert factory.judge_process_count(unset) == expected
    assert factory.judge_process_count(Settings(judge_model=MODEL, judge_processes=1)) == 1  # set: as set
    assert factory.judge_process_count(Settings(judge_model=MODEL, judge_processes=6)) == 6


@pytest.mark.parametrize("content, cores", [("max 100000\n", None), ("200000 100000\n", 2),
                                            ("150000 100000\n", 2), ("50000 100000\n", 1), ("garbage", None)])
def test_a_cgroup_cpu_quota_caps_the_default(tmp_path, content, cores):
    from judgeflow.judge.config import cpu_quota_cores

    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(content)
    assert cpu_quota_cores(str(cpu_max)) == cores
    assert cpu_quota_cores(str(tmp_path / "missing")) is None


def test_workers_ignore_ctrl_c_the_run_ends_them(server):
    with JudgeProcessPool(pool_settings(server, max_concurrency=2, judge_processes=2)) as pool:
        pool.start()
        assert pool.wait_ready()
        pids = pool.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        assert all(_alive(pid) for pid in pids)
        assert pool.complete(opinions_request()).content and pool.complete(opinions_request()).content
    for pid in pids:
        assert _wait_gone(pid)


def test_large_requests_and_replies_both_ways_at_once_never_deadlock():
    """Requests and replies each larger than a pipe's buffer (64 KiB on Linux),
    sent both ways at once: a run blocked writing its next calls to a worker
    must still read the worker's replies, or the worker, blocked writing them,
    never reads those calls (both sides wait for ever)."""
    big = "y" * 150_000

    def responder(req):
        return json_reply({"opinions": [big]})

    async def chain(pool, i: int) -> int:
        done = 0
        for _ in range(6):  # each call sent as the previous one's reply arrives
            reply = await pool.acomplete(opinions_request(output=f"{i} {big}"))
            assert len(reply.content) > len(big)
            done += 1
        return done

    with JudgeServer(responder) as srv, \
            JudgeProcessPool(pool_settings(srv, max_concurrency=8, judge_processes=1)) as pool:
        async def run() -> list[int]:
            return await asyncio.gather(*(chain(pool, i) for i in range(8)))

        results: list = []
        # in a thread of its own: a deadlocked run blocks its event loop in a pipe write,
        # where no asyncio timeout can reach it
        caller = threading.Thread(target=lambda: results.append(asyncio.run(run())), daemon=True)
        caller.start()
        caller.join(90)
        if caller.is_alive():
            for pid in pool.worker_pids():  # break the pipes, so the caller and the pool can finish
                if pid:
                    os.kill(pid, signal.SIGKILL)
            caller.join(30)
            pytest.fail("the run and its judge worker deadlocked on their pipes")
        assert results == [[6] * 8]


def test_a_metric_model_goes_through_the_workers_and_its_unanswered_attempt_is_billed_at_its_price(server):
    """The run's process never imports litellm: a worker's hello carries the price map's prices of every model
    its metrics ask, so an attempt of the metric's model sent without usage coming back (a 500) is billed at that
    model's estimate, not at the judge model's configured prices; the call asks that model on the same bound."""
    from dataclasses import replace

    from judgeflow.judge.spend import attempt_estimate

    config = replace(pool_settings(server, max_concurrency=2, judge_processes=1, judge_input_cost_per_mtok=100.0,
                                   judge_output_cost_per_mtok=100.0), metric_models=("openai/gpt-4o-mini",))
    request = replace(opinions_request(), model="openai/gpt-4o-mini")
    with JudgeProcessPool(config).start() as pool:
        assert pool.wait_ready(60)  # its hello read: the prices it carries are known
        server.script(error_reply(500, "overloaded"))
        reply = pool.complete(request)
    assert [r.model for r in server.requests] == ["gpt-4o-mini", "gpt-4o-mini"]
    assert (reply.model, reply.calls) == ("openai/gpt-4o-mini", 2)
    estimate = attempt_estimate((0.15, 0.6), request)
    own = (reply.prompt_tokens * 0.15 + reply.completion_tokens * 0.6) / 1e6
    assert reply.cost_usd == pytest.approx(estimate + own)
    assert reply.cost_usd < attempt_estimate((100.0, 100.0), request)  # not the judge model's prices
