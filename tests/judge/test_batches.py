"""The batch judge (judgeflow/judge/batches.py) below a run: its lines' ``custom_id``s when an attempt
fails on the run's own side, over real HTTP to the test judge server's Files and Batches API, with
its batches on record in a real PostgreSQL (judgeflow/db/judge_batches.py). The nights around it,
stopped and resumed, are tests/flows/test_batch_night.py."""

from __future__ import annotations

import asyncio
import json
import math
import socket

import pytest
from sqlalchemy import text

from judgeflow.config.settings import Settings
from judgeflow.db import judge_batches, migrate
from judgeflow.db.engine import engine_for
from judgeflow.db.schema import SCHEMA
from judgeflow.judge.base import JudgeReply, JudgeRequest
from judgeflow.judge.batch_lines import LineOnRecord
from judgeflow.judge.batches import BatchJudge, Waiting
from judgeflow.judge.config import JudgeConfig
from judgeflow.judge.litellm_batches import LiteLLMBatches
from judgeflow.judge.retry import CallRetry
from judgeflow.judge.send_gate import Call
from judgeflow.tasks.batches import RunBatchLedger
from tests.judge.test_litellm_batches import opinions_request
from tests.support.judge_server import JudgeServer

PAIR = ("tr-1", "toxicity")
OUTPUT = "I think cats rule. Fact: water is wet."


class Killed(BaseException):
    """The run's death (SIGKILL) at a point of its own: nothing after it runs."""


class Ledger(RunBatchLedger):
    """The record of one run's batches (tasks/batches.py), without its table in the Prefect UI; its first
    ``unreadable`` reads of the record go to a database that refuses the connection; ``dies``: the run
    dies right after recording a batch's intent (``"intended"``: before its creation is asked) or right
    before recording the id of the batch the provider created (``"created"``)."""

    def __init__(self, settings: Settings, owner: str, unreadable: int = 0, dies: str | None = None) -> None:
        super().__init__(settings, owner, None, "openai")
        self.unreadable = unreadable
        self.dies, self.died = dies, False

    def intend(self, token, round_no, model, lines) -> None:
        super().intend(token, round_no, model, lines)
        self._die("intended")

    def adopt(self, token, batch_id) -> None:
        self._die("created")
        super().adopt(token, batch_id)

    def _die(self, at: str) -> None:
        if self.dies == at:
            self.died = True
            raise Killed(at)

    def lines_on_record(self, custom_ids: list[str]) -> dict[str, LineOnRecord]:
        if self.unreadable <= 0:
            return super().lines_on_record(custom_ids)
        self.unreadable -= 1
        refusing = f"postgresql+psycopg://judgeflow@127.0.0.1:{_refusing_port()}/judgeflow"
        return judge_batches.lines_on_record(Settings(database_url=refusing), custom_ids)

    def show(self, rows) -> None:
        pass


def _refusing_port() -> int:
    """A loopback port nobody listens on: a connection there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PairGate:
    """A claimed pair's gate that always lets its calls go (the run's is judgeflow/run/gate.py)."""

    pair = PAIR

    def fresh_until(self) -> float:
        return math.inf

    async def confirm(self) -> bool:
        return True


@pytest.fixture
def settings(db, database_url) -> Settings:
    migrate.upgrade(db)
    return Settings(database_url=database_url)


def batch_judge(server: JudgeServer, ledger: Ledger) -> BatchJudge:
    config = JudgeConfig(model="openai/judge-test", api_base=server.url, api_key="test-key", timeout_s=10)
    return BatchJudge(LiteLLMBatches.from_config(config), ledger, model=config.model,
                      waiting=Waiting(why_stop=lambda: None, poll_s=0.05, poll_max_s=0.1, settle_s=0.05),
                      retry=CallRetry(max_retries=4, backoff_base_s=0.01, backoff_max_s=0.01))


def request() -> JudgeRequest:
    return opinions_request(OUTPUT)


async def _until(predicate, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


def test_a_line_whose_round_could_not_read_the_record_keeps_its_custom_id_so_the_next_run_pays_nothing_again(
        settings):
    """The round's read of the record fails (the database refuses the connection): the call's next
    attempt is the same line, not a new one. A run killed once it is out (its batch held at the
    provider) is resumed by one that finds that line on record and waits on it: one line billed.
    Numbered by the retry loop's attempts it was two: the killed run's attempt 1, the next run's 0."""
    with JudgeServer() as server:
        server.batch_api.hold()

        async def night() -> JudgeReply:
            killed = batch_judge(server, Ledger(settings, "run-a", unreadable=1))
            call = asyncio.ensure_future(killed.acomplete(request(), Call(PairGate())))
            await _until(lambda: killed.waits())  # out, on record, waited on
            (out,) = killed.waits()
            call.cancel()  # the run killed while its batch is out
            killed.close()
            resumed = batch_judge(server, Ledger(settings, "run-b"))
            answer = asyncio.ensure_future(resumed.acomplete(request(), Call(PairGate())))
            await _until(lambda: resumed.waits())
            assert [w.batch_id for w in resumed.waits()] == [out.batch_id]  # it waits there: nothing new sent
            server.batch_api.release()
            return await answer

        reply = asyncio.run(night())
        sent = server.batch_api.custom_ids_received()
        billed = len(server.requests)
    assert json.loads(reply.content) == {"opinions": ["I think cats rule"]}
    assert len(sent) == 1 and set(sent.values()) == {1}, sent
    assert billed == 1


def test_a_batch_whose_answers_could_not_be_read_is_read_again_not_sent_again(settings):
    """The provider answered the line, but reading its output failed (a 503): the next attempt waits
    on the same batch and reads it again; the line went out, and was billed, once. (Three reads
    fail: one 503 was once absorbed below the adapter, the judge seeing no failure; with three, its
    attempt fails whatever the client below does.)"""
    with JudgeServer() as server:
        server.batch_api.fail_file_reads(3)
        judge = batch_judge(server, Ledger(settings, "run-a"))
        reply = asyncio.run(judge.acomplete(request(), Call(PairGate())))
        sent = server.batch_api.custom_ids_received()
        billed = len(server.requests)
    assert json.loads(reply.content) == {"opinions": ["I think cats rule"]}
    assert server.batch_api.file_reads_failed == 3
    assert server.batch_api.batches_created == 1 and list(sent.values()) == [1], sent
    assert billed == 1


@pytest.mark.parametrize("dies", ["created", "intended"])
def test_a_run_killed_around_a_batchs_creation_leaves_it_known_so_the_next_run_sends_it_once(settings, dies):
    """The run dies right after the provider created its batch, before it recorded the batch's id
    (``created``), or right after recording its intent, before the creation was asked (``intended``).
    The next run finds the intent on record: it looks the batch up at the provider by the token in its
    metadata and waits on it (``created``), or, the provider having none, sends the line (``intended``).
    Either way the line came in once and was billed once, and no intent is left on record."""
    with JudgeServer() as server:

        async def night() -> tuple[JudgeReply, bool]:
            killed = batch_judge(server, Ledger(settings, "run-a", dies=dies))
            call = asyncio.ensure_future(killed.acomplete(request(), Call(PairGate())))
            await _until(lambda: killed.ledger.died)
            call.cancel()
            killed.close()
            created_before = server.batch_api.batches_created
            resumed = batch_judge(server, Ledger(settings, "run-b"))
            return await resumed.acomplete(request(), Call(PairGate())), created_before

        reply, created_before = asyncio.run(night())
        sent = server.batch_api.custom_ids_received()
        billed = len(server.requests)
        created = server.batch_api.batches_created
    assert created_before == (1 if dies == "created" else 0)
    assert json.loads(reply.content) == {"opinions": ["I think cats rule"]}
    assert created == 1 and len(sent) == 1 and set(sent.values()) == {1}, sent
    assert billed == 1
    with engine_for(settings).connect() as conn:
        statuses = conn.execute(text(f"SELECT b.status, count(l.custom_id) FROM {SCHEMA}.judge_batches b "
                                     f"JOIN {SCHEMA}.judge_batch_lines l USING (batch_id) GROUP BY b.status")).all()
    assert statuses == [("completed", 1)]
