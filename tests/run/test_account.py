"""The account limit (judgeflow/run/account.py): its shape keeps every minute under JUDGEFLOW_JUDGE_RPM/TPM,
a process spends blocks of permits with tokens corrected by usage, and, against the real Prefect server's
global concurrency limit and the judge server's account limit: processes together stay under it with no 429,
a 429 from outside slows every process, and an unreachable API is one line, exit 2."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest

from judgeflow.config.settings import Settings
from judgeflow.errors import PrefectServerError, TransientJudgeError
from judgeflow.judge.litellm_judge import LiteLLMJudge
from judgeflow.judge.retry import CallRetry
from judgeflow.judge.send_gate import Call
from judgeflow.run import account as account_module
from judgeflow.run.account import (
    HOLD_S, RECKON_MARGIN, RECKON_TAKES, REQUEST_SLOTS, RPM_NAME, TPM_NAME, AccountLimit, RateShape, _Block, _Reckoning, account_id,
    account_shapes,
    account_status, ensure_account_limits,
)
from judgeflow.run.gate import PairGate
from judgeflow.run.policy import RunPolicy
from tests.judge.test_litellm_judge import API_KEY, MODEL, opinions_request
from tests.support.judge_server import JudgeServer, error_reply, rule_responder
from tests.support.tcp_gate import TcpGate
from tests.support.traces import insert_traces, results, scripted_trace


# --- the shape: no window of 60 s over the limit ------------------------------------------------

@pytest.mark.parametrize("per_minute", [1, 2, 30, 240, 600, 10_000, 2_000_000])
def test_the_burst_and_the_decay_over_a_minute_and_a_hold_add_up_to_the_limit(per_minute):
    shape = RateShape("x", per_minute, REQUEST_SLOTS)
    assert 1 <= shape.block <= shape.burst <= max(1, per_minute // 2) or per_minute == 1
    worst_minute = shape.burst + shape.decay_per_s / shape.unit * (60 + HOLD_S)
    assert worst_minute == pytest.approx(per_minute)
    if per_minute >= 600:  # within 10% of the limit once started
        assert shape.items_per_minute >= 0.9 * per_minute


def test_the_settings_make_the_shapes():
    assert account_shapes(Settings(_env_file=None)) == []
    settings = Settings(_env_file=None, judge_rpm=600, judge_tpm=90_000)
    shapes = account_shapes(settings)
    account = account_id(settings)
    assert [(s.name, s.per_minute, s.unit) for s in shapes] == [
        (f"{RPM_NAME}-{account}", 600, REQUEST_SLOTS), (f"{TPM_NAME}-{account}", 90_000, 1)]
    assert RunPolicy.for_run(Settings(_env_file=None)).account is None


def test_each_key_has_a_limit_of_its_own_named_without_the_key(monkeypatch):
    for name in [n for n in os.environ if n.endswith(("API_KEY", "_API_BASE", "_BASE_URL", "_TOKEN"))]:
        monkeypatch.delenv(name)
    key_a, key_b = "sk-aaaa-1234567890", "sk-bbbb-1234567890"
    a = _settings(judge_rpm=600, judge_api_key=key_a)
    names = {account_shapes(s)[0].name for s in (a, _settings(judge_rpm=60, judge_api_key=key_a))}
    assert len(names) == 1  # one key, one limit, whatever each process's figure
    b = _settings(judge_rpm=600, judge_api_key=key_b)
    assert account_shapes(b)[0].name != account_shapes(a)[0].name
    other_endpoint = _settings(judge_rpm=600, judge_api_key=key_a, judge_api_base="https://other.example/v1")
    assert account_shapes(other_endpoint)[0].name != account_shapes(a)[0].name
    # the key from the provider's variable, as litellm reads it, when the settings hold none
    monkeypatch.setenv("OPENAI_API_KEY", key_b)
    assert account_shapes(_settings(judge_rpm=600, judge_model="openai/gpt-4o-mini"))[0].name != \
        account_shapes(_settings(judge_rpm=600, judge_model="openai/gpt-4o-mini", judge_api_key=key_a))[0].name
    for settings in (a, b, other_endpoint):
        name = account_shapes(settings)[0].name
        assert "sk-" not in name and "1234" not in name and len(name) == len(RPM_NAME) + 13
    named = _settings(judge_rpm=600, judge_api_key=key_a, judge_account="Team A / prod")
    assert account_shapes(named)[0].name == f"{RPM_NAME}-team-a-prod"
    assert account_shapes(named)[0].name == account_shapes(_settings(judge_rpm=600, judge_account="team a prod"))[0].name


# --- a process's blocks ---------------------------------------------------------------------------

def _counting_block(shape: RateShape) -> tuple[_Block, list[int]]:
    taken: list[int] = []

    async def acquire(_shape, slots, most):
        taken.append(slots)
        return slots, account_module.time.monotonic()

    return _Block(shape, acquire), taken


def test_a_process_takes_a_block_at_a_time_and_spends_it_locally():
    block, taken = _counting_block(RateShape(RPM_NAME, 600, REQUEST_SLOTS))  # a block of 5 requests

    async def six():
        for _ in range(6):
            await block.take(1)

    asyncio.run(six())
    # blocks of 5 requests, up to two fetched ahead while one is spent: two to four acquisitions for six
    assert set(taken) == {5 * REQUEST_SLOTS} and 2 <= len(taken) <= 4


def test_a_process_alone_on_the_limit_reckons_its_room_and_stops_at_the_first_sign_of_another():
    shape = RateShape(RPM_NAME, 600, REQUEST_SLOTS)  # limit 1000 slots, decay ~951.6 slots/s, blocks of 500
    decay, margin = shape.decay_per_s, RECKON_MARGIN * 500
    reckoning = _Reckoning(shape)
    assert reckoning.room(10.0) is None  # nothing known: read the limit
    assert reckoning.read(1000, 0, 10.0) == 1000 and not reckoning.alone
    reckoning.took(1000, 10.0)
    assert reckoning.room(10.5) is None  # not known to be alone yet
    # a read 0.5 s later finds the limit where this process's take and the decay left it: alone
    assert reckoning.read(1000, 1000 - decay * 0.5, 10.5) == pytest.approx(decay * 0.5)
    assert reckoning.alone
    reckoning.took(400, 10.5)
    assert reckoning.room(11.0) == pytest.approx(decay - 400 - margin)  # no read: 1000 - (1400 - d)
    reckoning.pending = 300  # its own take in flight counts as taken
    assert reckoning.room(11.0) == pytest.approx(decay - 700 - margin)
    reckoning.pending = 0
    for step in range(RECKON_TAKES - 1):
        reckoning.took(100, 11.0 + step)
    assert reckoning.room(14.5) is None  # read again every RECKON_TAKES takes: errors do not pile up
    # another process took a block meanwhile: the next read shows more than reckoned
    reckoning.read(1000, reckoning._reckoned(14.5) + 500, 14.5)
    assert not reckoning.alone and reckoning.room(14.6) is None


def test_permits_not_spent_within_the_hold_expire(monkeypatch):
    block, taken = _counting_block(RateShape(RPM_NAME, 600, REQUEST_SLOTS))
    now = [1000.0]
    monkeypatch.setattr(account_module.time, "monotonic", lambda: now[0])
    asyncio.run(block.take(1))
    assert block._available() >= 4
    now[0] += HOLD_S + 0.1
    assert block._available() == 0  # the permits left over are not sent late
    before = len(taken)
    asyncio.run(block.take(1))
    assert len(taken) > before  # a new block was taken for the next request


def test_tokens_are_taken_at_the_estimate_and_corrected_by_the_usage():
    limit = AccountLimit([RateShape(TPM_NAME, 60_000, 1)])  # blocks of 500 tokens
    taken: list[int] = []

    async def acquire(_shape, slots, most):
        taken.append(slots)
        return slots, account_module.time.monotonic()

    limit._blocks[TPM_NAME]._acquire = acquire
    tokens = limit._blocks[TPM_NAME]
    asyncio.run(limit.take(400))
    assert set(taken) == {500} and tokens.balance == sum(taken) - 400
    limit.used(400, 900)  # the reply used 500 more than estimated: a debt
    assert tokens.balance == sum(taken) - 900
    asyncio.run(limit.take(100))  # the debt is paid before the next request goes
    assert tokens.balance == sum(taken) - 900 - 100 >= 0  # what the two used, not what was estimated
    before = tokens.balance
    limit.used(100, 40)  # used less: a credit for the next
    assert tokens.balance == before + 60


# --- with the real Prefect server and the judge server's account limit ---------------------------

def _settings(**limits) -> Settings:
    return Settings(_env_file=None, **limits)


def _bounded(times: list[float], shape: RateShape) -> bool:
    """No stretch of sends more than the shape lets through: the burst plus its decay over the stretch and a hold."""
    rate = shape.decay_per_s / shape.unit
    return all(j - i + 1 <= shape.burst + rate * (times[j] - times[i] + HOLD_S) + 1
               for i in range(len(times)) for j in range(i, len(times)))


@pytest.fixture
def fresh_limits(prefect_server):
    """No account limit left over from another test (the names are the account's, shared)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    def drop():
        with get_client(sync_client=True) as client:
            for limit in client.read_global_concurrency_limits(limit=200):
                if limit.name.startswith((RPM_NAME, TPM_NAME)):
                    try:
                        client.delete_global_concurrency_limit_by_name(limit.name)
                    except ObjectNotFound:
                        pass

    drop()
    account_module._LIMITS.clear()
    yield prefect_server
    drop()
    account_module._LIMITS.clear()


def test_two_score_processes_stay_under_the_rpm_with_no_429(judgeflow_env, db, fresh_limits, judge_server):
    rpm = 240
    judge_server.account.rpm = rpm  # the provider refuses past it
    insert_traces(db, [scripted_trace(i)[0] for i in range(8)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env, PREFECT_API_URL=fresh_limits, JUDGEFLOW_JUDGE_RPM=str(rpm))
    command = [sys.executable, "-m", "judgeflow", "score", "--no-alerts", "--max-concurrency", "8", "--batch-size", "4"]
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    stats = judge_server.stats()["account"]
    assert stats["refused"] == 0 and stats["outside"] == 0
    # toxicity's chain: several calls a pair; sent at once they would break the bound below
    assert stats["accepted"] == judge_server.calls() > 20
    times = [t for t, _ in judge_server.account.accepted]
    assert _bounded(times, RateShape(RPM_NAME, rpm, REQUEST_SLOTS))
    assert len(results(db)) == 16  # every pair scored once, between them
    from judgeflow.config.settings import load_settings

    [row] = account_status(load_settings(judge_rpm=rpm))  # the processes' account: their endpoint and key
    assert row["created"] and row["limit"] == RateShape(RPM_NAME, rpm, 100).limit_slots


def _judge(server: JudgeServer) -> LiteLLMJudge:
    return LiteLLMJudge(MODEL, api_base=server.url, api_key=API_KEY, timeout_s=30, max_concurrency=4,
                        retry=CallRetry(max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05))


def _calls(limit: AccountLimit, count: int) -> list[Call]:
    policy = RunPolicy(_settings(), account=limit)
    return [Call(PairGate(policy, None, None)) for _ in range(count)]


async def _send_all(judge: LiteLLMJudge, calls: list[Call]) -> None:
    await asyncio.gather(*(judge.acomplete(opinions_request(f"opinion {uuid.uuid4()}"), call=call) for call in calls))


def test_tokens_per_minute_hold_across_two_processes_corrected_by_usage(fresh_limits):
    tpm = 12_000
    settings = _settings(judge_tpm=tpm)
    ensure_account_limits(settings)
    shape = account_shapes(settings)[0]
    with JudgeServer(tpm_limit=tpm) as server:
        # two processes' limits: each its own blocks, the Prefect limit between them
        judges = [_judge(server), _judge(server)]
        limits = [AccountLimit([shape]), AccountLimit([shape])]

        async def both():
            await asyncio.gather(*(_send_all(j, _calls(lim, 12)) for j, lim in zip(judges, limits)))

        asyncio.run(both())
        stats = server.stats()["account"]
        assert stats["refused"] == 0 and stats["accepted"] == 24
        # what was taken is what the replies used, not the estimates: the estimate counts 60 completion
        # tokens, the judge server's replies use fewer, and the credit went to the next request
        used = sum(t for _, t in server.account.accepted)
        estimated = 24 * (len(str(opinions_request("x").messages)) // 4 + 60)
        assert used < estimated
        assert all(lim.acquired >= 1 for lim in limits)


@pytest.mark.slow  # about 25 s: the other process must have calls to send for the whole cool-down
def test_a_429_from_outside_slows_every_process(fresh_limits):
    settings = _settings(judge_rpm=1200)
    ensure_account_limits(settings)
    shape = account_shapes(settings)[0]
    wait, refused_at = 8.0, []
    answered = itertools.count()

    def another_client_on_the_key(req):
        # mid-stream, the provider refuses one request: someone else used the account's minute up
        if next(answered) == 12:
            refused_at.append(time.time())
            return error_reply(429, "Rate limit reached (another client)", headers={"Retry-After": str(wait)})
        return rule_responder(req)

    with JudgeServer(another_client_on_the_key, latency_mean_s=0.05) as server:
        judges = [_judge(server), _judge(server)]
        limits = [AccountLimit([shape]), AccountLimit([shape])]

        async def both():
            await asyncio.gather(*(_send_all(j, _calls(lim, 150)) for j, lim in zip(judges, limits)))

        asyncio.run(both())
        stats = server.stats()
        accepted = [t for t, _ in server.account.accepted]
    assert stats["statuses"] == {"429": 1, "200": 300} and len(refused_at) == 1
    # the process refused set the shared limit's slots past its room for the Retry-After; once the API
    # has it, the other process, which alone would send at the full rate (20 a second), sends no more
    # than the permits it holds and the two blocks it may have had on their way (twice the limit's
    # burst) until the Retry-After is out (without the shared cool-down: 152 in this window)
    cooled_at = next(lim.cooled_at for lim in limits if lim.cooled_at is not None)
    end = refused_at[0] + wait * 0.9
    assert end - cooled_at >= 2.0, "the Prefect API took the cool-down too late to tell"
    cooling = [round(t - refused_at[0], 2) for t in accepted if cooled_at + 0.2 <= t < end]
    assert len(cooling) <= 2 * shape.burst, cooling
    assert max(accepted) - refused_at[0] >= wait * 0.9  # the rest went after it


def test_an_unreachable_prefect_api_is_one_line_and_exit_2(judgeflow_env, tmp_path):
    with pytest.raises(PrefectServerError, match="JUDGEFLOW_JUDGE_RPM/TPM need"):
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
            ensure_account_limits(_settings(judge_rpm=60))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_"))}
    env.update(judgeflow_env, PREFECT_API_URL="http://127.0.0.1:9/api", JUDGEFLOW_JUDGE_RPM="60")
    done = subprocess.run([sys.executable, "-m", "judgeflow", "calibrate", "--sample", "--yes"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "JUDGEFLOW_JUDGE_RPM/TPM" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr


# --- the API stops answering mid-run ---------------------------------------------------------------

@contextmanager
def _behind_a_gate(prefect_url: str):
    """The suite's Prefect API reached through a relay the test shuts and opens (tests/support/tcp_gate.py).
    Prefect's client itself retries a request whose connection failed after it had connected once, for
    about a minute (PREFECT_CLIENT_MAX_RETRIES=5, 2 to 32 s apart): the outage past that is judgeflow's to
    ride out, and the tests make the client give up at once to reach it."""
    from urllib.parse import urlsplit

    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    url = urlsplit(prefect_url)
    with TcpGate((url.hostname, url.port)) as gate, temporary_settings(
            updates={PREFECT_API_URL: f"http://127.0.0.1:{gate.port}{url.path}", PREFECT_CLIENT_MAX_RETRIES: 0}):
        yield gate


async def _until_a_fetch_fails(limit: AccountLimit) -> int:
    """Spend the permits in hand; the next block's fetch meets the shut API."""
    for sent in itertools.count():
        try:
            await limit.take(1)
        except TransientJudgeError:
            return sent


def test_a_prefect_api_that_answers_again_lets_the_run_go_on(fresh_limits):
    settings = _settings(judge_rpm=600)
    ensure_account_limits(settings)
    with _behind_a_gate(fresh_limits) as gate:
        limit = AccountLimit(account_shapes(settings), outage_s=60)
        policy = RunPolicy(settings, account=limit)

        async def outage() -> float:
            await limit.take(1)
            gate.shut()
            assert await _until_a_fetch_fails(limit) < 40 and limit.failure is not None
            asyncio.get_running_loop().call_later(1.0, gate.open)  # the API back 1 s later
            started = time.monotonic()
            assert await policy.why_not_start() is None  # the pair waited for it, and goes
            waited = time.monotonic() - started
            for _ in range(10):
                await limit.take(1)  # permits again, from Prefect
            return waited

        waited = asyncio.run(outage())
    assert 0.9 <= waited < 20 and limit.outages == 1 and limit.gone is None and limit.failure is None
    assert policy.why_not_claim() is None


def test_a_prefect_api_that_never_answers_again_ends_the_run_in_one_line(fresh_limits):
    settings = _settings(judge_rpm=600)
    ensure_account_limits(settings)
    with _behind_a_gate(fresh_limits) as gate:
        limit = AccountLimit(account_shapes(settings), outage_s=1.5)
        policy = RunPolicy(settings, account=limit)

        async def outage():
            await limit.take(1)
            gate.shut()
            await _until_a_fetch_fails(limit)
            refusal = await policy.why_not_start()
            with pytest.raises(TransientJudgeError) as sent:
                await limit.take(1)
            return refusal, str(sent.value)

        refusal, sent = asyncio.run(outage())
    assert refusal is not None and refusal.end == "account" and "\n" not in refusal.why
    assert re.match(r"the account limit's Prefect API has not answered for \d+ s \(ConnectError\)", refusal.why)
    assert sent == refusal.why  # no attempt goes without its permit
    assert policy.why_not_claim() == refusal  # the run claims no more, and says why
