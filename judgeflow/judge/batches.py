"""The judge of a run through the provider's batch API (``JUDGEFLOW_JUDGE_BATCH``, ``--batch``).

:class:`BatchJudge` is a :class:`~judgeflow.judge.base.Judge` like any other,
so the metrics' one driver and the one retry policy stay as they are:
``acomplete`` does not send; each attempt joins the current **round** and
waits for its line's answer. A round is sent once no line joined it for the
settle window (``JUDGEFLOW_JUDGE_BATCH_SETTLE_S``): its lines, one model per
file, packed into as few files as the provider's limits allow (the adapter's
``pack``), each file uploaded and made a batch.
So a metric's steps become successive rounds by themselves (a metric of
three steps, three rounds; of one, one), and the scores are those of the
same calls made online.

* **Nothing paid twice.** Each batch is recorded with its lines (the ledger,
  judgeflow/db/judge_batches.py, through the run's tasks: tasks/batches.py)
  before it is created, under a token its metadata carries, and its id put
  in the token's place before the run waits on it: a run killed in between
  leaves a record the next run finds the batch by at the provider (adopted,
  waited on), or learns it was never created (its lines sent). A line whose ``custom_id`` is in a live batch
  already (a run killed, stopped or out of time left it there) is waited on
  in that batch, not sent again. A line a run collected from a completed
  batch but whose pair it never stored (it was killed, stopped or out of time
  in a later round; or the pair runs again) is read again from that batch's
  output file when its pair's metric asks it again: a pair re-drives its
  steps from the first, and each step it had paid for is answered from the
  record. Its cost goes with it (the run that collected it stored nothing);
  asked again in the run that already handed it to the pair, it costs
  nothing more, as that pair's spend holds it already. A line the provider
  failed and this judge asked again online has no output file: its online
  answer is recorded as it comes (the ledger's ``answered_online``), and
  read from there in the same way.
* **What a run paid.** An answer an earlier run collected (or got online)
  and this one reads again from the record is on the row of the pair it
  stores (the earlier run stored nothing), but the earlier run billed it:
  :attr:`BatchJudge.prepaid` adds it up per metric, and the run's summary
  leaves it out of its own cost (``tasks/batches.py``).
* **A line that failed** is its attempt failing. A line the provider
  answered with an error is retried online (``Waiting.line_retry_online``,
  ``JUDGEFLOW_JUDGE_BATCH_LINE_RETRY``): the call's next attempts go to the
  online endpoint under the same retry loop, not into another turnaround; a
  permanent error (an invalid request, 400-class) is not retried at all (the
  loop's rule). Set to ``batch``, the next attempt is a new line of the next
  round: the only case of a call's next attempt being a new line (a new
  ``custom_id``). An attempt that failed on the run's side (the record could
  not be read, a batch could not be followed or its output read) is the same
  line again, which finds itself on record (waited on, or read again), so a
  line out or answered is not paid for twice, in this run or the next. A
  line the provider never answered because its batch expired or was
  cancelled is sent again once (the same line), in the next round; a second
  time, its call fails with that reason.
* **Waiting** is a poll of each batch out, with backoff from
  ``JUDGEFLOW_JUDGE_BATCH_POLL_S`` doubling up to ``_POLL_MAX_S``, each answer
  recorded and shown (the run's table of batches). It ends when the run's
  gate says the run may not go on (a stop, the time budget): the lines still
  out are withheld (their pairs deferred, their batches left to the next run,
  or cancelled when asked: ``--cancel-batches``).
* **Spend.** A line's reply carries its cost at the batch rate (the adapter
  prices it) and goes through :mod:`judgeflow.judge.spend` as any reply does.
  A line the provider did not answer is not billed.

The provider's side (the files and batches, the body of a line, its reply
priced) is the adapter's (:class:`BatchApi`); the record is the run's
(:class:`BatchLedger`); neither is imported here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from judgeflow.errors import CallWithheld, JudgeError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeBase, JudgeReply, JudgeRequest, Usage
from judgeflow.judge.batch_lines import (DEAD, ENDED, LOST, SUBMITTED, TOKEN_KEY, BatchLine, LineOnRecord, custom_id,
                                        intent_token, is_token, token_time)
from judgeflow.judge.retry import AttemptFailed, CallRetry, Pace, send_with_retries
from judgeflow.judge.send_gate import ANY_CALL, Call
from judgeflow.judge.spend import CallSpend

log = logging.getLogger("judgeflow.batches")

_STOP_CHECK_S = 0.2  # how soon a wait notices a stop or the end of the time budget
_CLOCK_SLACK_S = 600.0  # how far the provider's clock may be behind this host's, looking for an intent's batch


class BatchApi(Protocol):
    """The provider's batch API, as the judge's adapter speaks it
    (judgeflow/judge/litellm_batches.py; a status is its ``BatchStatus``)."""

    def line_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The body the online call would send for ``request``."""

    def pack(self, lines: list[tuple[str, JudgeRequest]]) -> list[list[tuple[str, JudgeRequest]]]:
        """``lines`` (custom id, request) in as few files as the provider's limits allow, one model each."""

    async def submit(self, lines: list[tuple[str, JudgeRequest]], metadata: dict[str, str] | None = None) -> str:
        """Upload ``lines`` (custom id, request) as one file, make it a batch: its id."""

    async def retrieve(self, batch_id: str, model: str | None = None) -> Any: ...

    async def find(self, key: str, value: str, since: float, model: str | None = None) -> str | None:
        """The id of the batch created since ``since`` (epoch s) whose metadata says ``key``: ``value``; None: none."""

    async def results(self, status: Any, model: str | None = None) -> dict[str, JudgeReply | JudgeError]:
        """Each answered line's reply (priced at the batch rate), or its error."""

    async def cancel(self, batch_id: str, model: str | None = None) -> Any: ...

    async def online_attempt(self, request: JudgeRequest, call: Call) -> JudgeReply | AttemptFailed:
        """One attempt of ``request`` on the online endpoint (a line the provider failed, retried)."""


class BatchLedger(Protocol):
    """The record of the batches (judgeflow/db/judge_batches.py, bound to a run by tasks/batches.py)."""

    def intend(self, token: str, round_no: int, model: str, lines: list[BatchLine]) -> None:
        """A batch about to be created, and its lines, on record under ``token`` (status ``creating``)."""

    def adopt(self, token: str, batch_id: str) -> None:
        """The batch of intent ``token`` is ``batch_id``."""

    def drop(self, token: str) -> None:
        """The intent ``token`` was never created: it goes, with its lines."""

    def lines_on_record(self, custom_ids: list[str]) -> dict[str, LineOnRecord]: ...

    def update(self, status: Any) -> None:
        """The provider's latest word on a batch (its ``id``, ``status``, ``completed``, ``failed``)."""

    def collected(self, batch_id: str, custom_ids: list[str]) -> None:
        """The lines whose answers were handed to their pairs: the batch holds them no more."""

    def answered_online(self, line: BatchLine, reply: JudgeReply) -> None:
        """``reply``: the online answer to ``line``, a line the provider failed."""

    def show(self, rows: list[dict[str, Any]]) -> None:
        """The run's table of batches (the Prefect UI)."""


@dataclass(frozen=True)
class Waiting:
    """How a run waits on its batches: the poll's first and longest pause, the
    settle window of a round, and ``why_stop`` (the run's gate: a stop, the
    time budget; None: go on). ``cancel_on_stop``: cancel what is out then."""

    why_stop: Callable[[], str | None]
    poll_s: float = 10.0
    poll_max_s: float = 300.0
    settle_s: float = 2.0
    cancel_on_stop: bool = False
    line_retry_online: bool = True


@dataclass(frozen=True)
class BatchWait:
    """One batch a run waits on, for whoever watches the run (:meth:`BatchJudge.waits`): its round,
    the lines this run waits on there, the provider's counts and status, its age and the next poll."""

    batch_id: str
    round: int | str
    lines: int
    completed: int
    failed: int
    status: str
    age_s: float
    next_poll_s: float


@dataclass
class _Line:
    custom_id: str
    pair: tuple[str, str] | None
    request: JudgeRequest
    model: str
    futures: list[asyncio.Future] = field(default_factory=list)
    resent: bool = False  # sent again once after its batch died
    prepaid: bool = False  # read again from a batch an earlier run collected (its cost is that run's)

    def settle(self, outcome: JudgeReply | AttemptFailed) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(outcome)

    def join(self, other: "_Line") -> None:
        self.futures.extend(other.futures)


class LineFailed(AttemptFailed):
    """A line the provider answered with an error (not one its batch never ran)."""


@dataclass
class _CallState:
    online: bool = False  # a line of the call failed in a batch: its next attempts go online
    failed: _Line | None = None  # that line: its online answer is recorded under its custom_id
    # the lines of the call the provider answered with an error: the next line's number in its custom_id.
    # Not the retry loop's attempt: an attempt that failed on the run's side (the record unreadable, a
    # batch not followed) leaves its line where it is, maybe out and answered, so the next attempt is
    # that line again and finds it on record; numbered by attempts, it would be a new line, and a
    # later run (which numbers from 0 again) another: one request paid twice (issue 59)
    line_no: int = 0


class BatchJudge(JudgeBase):
    """A judge whose calls go out in rounds of batches (the module doc)."""

    def __init__(self, api: BatchApi, ledger: BatchLedger, *, model: str, waiting: Waiting,
                 retry: CallRetry = CallRetry()) -> None:
        super().__init__()
        self.api, self.ledger, self._model, self.waiting, self.retry = api, ledger, model, waiting, retry
        self._pace = Pace()
        self._open: dict[str, _Line] = {}  # the round being gathered
        self._last_joined = 0.0
        self._gathering: asyncio.Task | None = None
        self.rounds = 0
        self._waits: dict[str, dict[str, _Line]] = {}  # batch id -> the lines this run waits on there
        self._tasks: set[asyncio.Task] = set()
        self.shown: dict[str, dict[str, Any]] = {}  # batch id -> its row in the run's table
        self.left_out: dict[str, str] = {}  # batch id -> why the run stopped waiting on it
        self.left_lines: dict[str, int] = {}  # batch id -> the lines this run left waiting there
        self._polls: dict[str, tuple[float, float]] = {}  # batch id -> (created, epoch s; next poll, monotonic)
        self._handed: set[str] = set()  # custom ids whose answers this judge handed to their pairs
        # metric -> what the answers an earlier run paid for, read again here, cost (the module doc)
        self.prepaid: dict[str, Usage] = {}

    @property
    def model(self) -> str:
        return self._model

    def close(self) -> None:
        for task in list(self._tasks):
            task.get_loop().call_soon_threadsafe(task.cancel)
        super().close()

    def waits(self) -> list[BatchWait]:
        """The batches this run waits on now, oldest first (the run's display)."""
        now, clock = time.time(), time.monotonic()
        waits = []
        for batch_id, lines in list(self._waits.items()):
            created, next_poll = self._polls.get(batch_id, (now, clock))
            row = self.shown.get(batch_id, {})
            waits.append(BatchWait(batch_id, row.get("round", ""), len(lines), int(row.get("completed") or 0),
                                   int(row.get("failed") or 0), str(row.get("status") or SUBMITTED),
                                   max(0.0, now - created), max(0.0, next_poll - clock)))
        return sorted(waits, key=lambda w: -w.age_s)

    async def acomplete(self, request: JudgeRequest, call: Call | None = None) -> JudgeReply:
        """One call: its attempts, each a line of a round, in the one retry loop."""
        call = call or ANY_CALL
        model = request.model or self._model
        # a line is billed only when answered, and its reply is priced at the batch rate by the adapter
        spend = CallSpend(model, None, request)
        state = _CallState()
        return await send_with_retries(lambda: self._attempt(request, call, model, state),
                                       policy=self.retry, spend=spend, pace=self._pace)

    async def _attempt(self, request: JudgeRequest, call: Call, model: str, state: _CallState
                       ) -> JudgeReply | AttemptFailed:
        if state.online:  # the online adapter asks the call's gate itself, once it holds a slot
            reply = await self.api.online_attempt(request, call)
            if isinstance(reply, JudgeReply) and state.failed is not None:
                await self._record_online(state.failed, reply)
            return reply
        if not await call.may_send():
            return AttemptFailed(CallWithheld(f"judge {model}: not sent, the pair may not go on"))
        pair = getattr(call.gate, "pair", None)
        line_id = custom_id(pair, request.step, self.api.line_body(request), state.line_no)
        line = _Line(line_id, pair, request, model)
        future = asyncio.get_running_loop().create_future()
        line.futures.append(future)
        self._join_round(line)
        outcome = await future
        state.line_no += isinstance(outcome, LineFailed)
        state.online = isinstance(outcome, LineFailed) and self.waiting.line_retry_online
        state.failed = line if state.online else None
        return outcome

    async def _record_online(self, line: _Line, reply: JudgeReply) -> None:
        """The online answer to ``line`` on record before its pair gets it: a run stopped before the
        pair is stored reads it from there instead of asking again."""
        self._handed.add(line.custom_id)
        try:
            await asyncio.to_thread(self.ledger.answered_online, BatchLine(
                line.custom_id, *(line.pair or ("", "")), line.request.step), reply)
        except Exception as error:  # noqa: BLE001 - the pair still gets it; only a later run would ask again
            log.warning("the online answer to line %s could not be recorded (%s)", line.custom_id, error)

    # ---- rounds -------------------------------------------------------------

    def _join_round(self, line: _Line) -> None:
        if line.custom_id in self._open:
            self._open[line.custom_id].join(line)
        else:
            self._open[line.custom_id] = line
        self._last_joined = time.monotonic()
        if self._gathering is None:
            self._gathering = self._spawn(self._gather())

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _gather(self) -> None:
        """Send the round once no line joined it for the settle window."""
        while True:
            wait = self._last_joined + self.waiting.settle_s - time.monotonic()
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        lines, self._open, self._gathering = self._open, {}, None
        self.rounds += 1
        why = self.waiting.why_stop()
        if why is not None:  # nothing is sent that nobody would wait for
            return _fail_all(lines.values(), CallWithheld(f"not sent in a batch: {why}"))
        try:
            await self._send_round(self.rounds, lines)
        except Exception as error:  # a line nobody answers would hold its pair for ever
            log.exception("round %d could not be sent", self.rounds)
            _fail_all(lines.values(), TransientJudgeError(f"the round of batch lines could not be sent: {error}"))

    async def _send_round(self, round_no: int, lines: dict[str, _Line]) -> None:
        """Adopt what a live batch carries already, fail what died twice, send the rest."""
        try:
            on_record = await asyncio.to_thread(self.ledger.lines_on_record, list(lines))
        except Exception as error:  # noqa: BLE001 - the record could not be read: nothing is sent
            return _fail_all(lines.values(), TransientJudgeError(f"the batches on record could not be read: {error}"))
        fresh: list[_Line] = []
        intents: dict[str, list[_Line]] = {}  # token -> the lines of a batch on record whose id is not known
        for line_id, line in lines.items():
            record = on_record.get(line_id)
            if record is not None and record.answered_online is not None:
                line.settle(self._hand(line, record.answered_online, prepaid=True))
            elif record is not None and is_token(record.live_batch):
                intents.setdefault(record.live_batch, []).append(line)
            elif record is not None and record.live_batch is not None:
                self._wait_on(record.live_batch, line.model, line)
            elif record is not None and record.answered_in is not None:
                line.prepaid = True
                self._wait_on(record.answered_in, line.model, line, at_once=True)
            elif record is not None and record.dead_batches >= 2:
                line.settle(AttemptFailed(_died_twice(record.dead_status)))
            else:
                fresh.append(line)
        for token, waiting in intents.items():
            fresh.extend(await self._find_intent(token, waiting))
        for packed in self.api.pack([(line.custom_id, line.request) for line in fresh]):
            chosen = [lines[line_id] for line_id, _ in packed]
            await self._submit(round_no, chosen[0].model, chosen)

    async def _find_intent(self, token: str, lines: list[_Line]) -> list[_Line]:
        """The lines of intent ``token`` (a batch on record before its creation, whose id its run never
        recorded: killed in between, or the creation's reply lost) that are to be sent: none when the
        provider has its batch (adopted and waited on), all when it has none (never created); none, each
        failed (its next attempt is the same line), when the provider or the record cannot say."""
        model = lines[0].model
        try:
            batch_id = await self.api.find(TOKEN_KEY, token, token_time(token) - _CLOCK_SLACK_S, model)
        except JudgeError as error:
            _fail_all(lines, error)
            return []
        try:
            if batch_id is None:
                await asyncio.to_thread(self.ledger.drop, token)
            else:
                await asyncio.to_thread(self.ledger.adopt, token, batch_id)
        except Exception as error:  # noqa: BLE001 - not sent while its intent stays on record
            _fail_all(lines, TransientJudgeError(f"batch intent {token} could not be recorded: {error}"))
            return []
        if batch_id is None:
            log.info("batch intent %s was never created at the provider: its %d line(s) are sent", token, len(lines))
            return lines
        log.info("batch %s (intent %s, its creator gone before recording it) adopted", batch_id, token)
        for line in lines:
            self._wait_on(batch_id, model, line)
        return []

    async def _submit(self, round_no: int, model: str, lines: list[_Line]) -> None:
        # on record before it is created, under a token it carries: a run killed before it knows the id
        # leaves a record a later run finds the batch by (:meth:`_find_intent`), not a batch nobody knows of
        token = intent_token()
        try:
            await asyncio.to_thread(self.ledger.intend, token, round_no, model, [
                BatchLine(line.custom_id, *(line.pair or ("", "")), line.request.step) for line in lines])
        except Exception as error:  # noqa: BLE001 - not on record: not sent (the next attempt is the same line)
            return _fail_all(lines, TransientJudgeError(f"the batch could not be recorded before its creation: {error}"))
        try:
            batch_id = await self.api.submit([(line.custom_id, line.request) for line in lines],
                                             metadata={"judgeflow_round": str(round_no), TOKEN_KEY: token})
        except JudgeError as error:  # its intent stays: the next attempt finds whether it was created after all
            return _fail_all(lines, error)
        try:
            await asyncio.to_thread(self.ledger.adopt, token, batch_id)
        except Exception as error:  # noqa: BLE001 - out, its intent on record: wait on it all the same
            log.warning("batch %s could not be recorded (%s); waiting on it all the same", batch_id, error)
        self.shown[batch_id] = {"batch": batch_id, "round": round_no, "model": model, "lines": len(lines),
                                "completed": 0, "failed": 0, "status": SUBMITTED}
        log.info("round %d: batch %s sent (%d line(s), %s)", round_no, batch_id, len(lines), model)
        for line in lines:
            self._wait_on(batch_id, model, line)

    # ---- waiting ------------------------------------------------------------

    def _wait_on(self, batch_id: str, model: str, line: _Line, at_once: bool = False) -> None:
        """Wait on ``batch_id`` for ``line``; ``at_once``: the batch ended already, ask without a first pause."""
        waiting = self._waits.get(batch_id)
        if waiting is None:
            waiting = self._waits[batch_id] = {}
            self._spawn(self._poll(batch_id, model, 0.0 if at_once else self.waiting.poll_s))
        if line.custom_id in waiting:
            waiting[line.custom_id].join(line)
        else:
            waiting[line.custom_id] = line

    async def _poll(self, batch_id: str, model: str, first_pause: float) -> None:
        """:meth:`_follow` the batch; whatever goes wrong, no line of it is left unanswered."""
        try:
            await self._follow(batch_id, model, first_pause)
        except Exception as error:
            log.exception("batch %s could not be followed", batch_id)
            _fail_all(self._waits.pop(batch_id, {}).values(),
                      TransientJudgeError(f"batch {batch_id} could not be followed: {error}"))
        finally:
            self._polls.pop(batch_id, None)

    async def _follow(self, batch_id: str, model: str, pause: float) -> None:
        """Ask the provider with backoff until the batch ended or the run may not go on."""
        while True:
            created = self._polls.get(batch_id, (time.time(), 0.0))[0]
            self._polls[batch_id] = (created, time.monotonic() + pause)
            why = await self._pause(pause)
            if why is not None:
                return await self._leave(batch_id, model, why)
            state = await self._retrieve(batch_id, model)
            if state is not None:
                if isinstance(getattr(state, "created_at", None), (int, float)):
                    self._polls[batch_id] = (float(state.created_at), self._polls[batch_id][1])
                await self._seen(state)
                if state.status in ENDED:
                    return await self._collect(state, model)
            pause = min(max(pause * 2, self.waiting.poll_s), self.waiting.poll_max_s)

    async def _retrieve(self, batch_id: str, model: str) -> Any:
        """The provider's word on the batch; None when it could not be asked (asked again after
        the next pause); a batch it does not know (a permanent error) is lost: its lines go out again."""
        try:
            return await self.api.retrieve(batch_id, model)
        except PermanentJudgeError as error:
            log.warning("batch %s is not the provider's (%s): its lines are sent again", batch_id, error)
            return Lost(batch_id)
        except JudgeError as error:
            log.warning("batch %s could not be polled (%s)", batch_id, error)
            return None

    async def _pause(self, seconds: float) -> str | None:
        """Sleep ``seconds``, waking early with why the run may not go on."""
        until = time.monotonic() + seconds
        while True:
            why = self.waiting.why_stop()
            left = until - time.monotonic()
            if why is not None or left <= 0:
                return why
            await asyncio.sleep(min(left, _STOP_CHECK_S))

    async def _seen(self, state: Any) -> None:
        row = self.shown.setdefault(state.id, {"batch": state.id, "round": "", "model": "", "lines": state.total})
        changed = (row.get("status"), row.get("completed"), row.get("failed")) != (
            state.status, state.completed, state.failed)
        row.update(status=state.status, completed=state.completed, failed=state.failed)
        if not changed:
            return
        try:
            await asyncio.to_thread(self.ledger.update, state)
            await asyncio.to_thread(self.ledger.show, list(self.shown.values()))
        except Exception as error:  # noqa: BLE001 - the next poll records it again
            log.warning("batch %s: its state could not be recorded (%s)", state.id, error)

    async def _collect(self, state: Any, model: str) -> None:
        """Hand each line its answer; a line its dead batch left unanswered goes out once more."""
        lines = self._waits.pop(state.id, {})
        try:
            results = {} if state.status == LOST else await self.api.results(state, model)
        except JudgeError as error:
            return _fail_all(lines.values(), error)
        answered = [line_id for line_id in lines if isinstance(results.get(line_id), JudgeReply)]
        try:
            await asyncio.to_thread(self.ledger.collected, state.id, answered)
        except Exception as error:  # noqa: BLE001 - left uncollected: a later run of the same request waits on it
            log.warning("batch %s: its collected lines could not be recorded (%s)", state.id, error)
        for line_id, line in lines.items():
            answer = results.get(line_id)
            if isinstance(answer, JudgeReply):
                line.settle(self._hand(line, answer, line.prepaid))
            elif state.status in DEAD and not line.resent:
                line.resent = True
                self._join_round(line)
            elif state.status in DEAD:
                line.settle(AttemptFailed(_died_twice(state.status)))
            else:
                line.settle(LineFailed(answer or TransientJudgeError(
                    f"batch {state.id} ended {state.status} without an answer for the line")))

    def _hand(self, line: _Line, answer: JudgeReply, prepaid: bool = False) -> JudgeReply:
        """``answer`` as its pair gets it: a second time in this run (the pair ran again), without its
        usage, which the pair's spend holds already from the first; ``prepaid``: an earlier run paid
        for it (:attr:`prepaid`)."""
        if line.custom_id in self._handed:
            return replace(answer, prompt_tokens=0, completion_tokens=0, cached_tokens=0, cost_usd=0.0)
        self._handed.add(line.custom_id)
        if prepaid:
            metric = line.pair[1] if line.pair else ""
            self.prepaid.setdefault(metric, Usage()).add(answer)
        return answer

    async def _leave(self, batch_id: str, model: str, why: str) -> None:
        """Stop waiting on ``batch_id``: its lines' pairs are deferred, the batch stays out (or is cancelled)."""
        lines = self._waits.pop(batch_id, {})
        self.left_out[batch_id] = why
        self.left_lines[batch_id] = len(lines)
        if self.waiting.cancel_on_stop:
            try:
                await self.api.cancel(batch_id, model)
            except JudgeError as error:
                log.warning("batch %s could not be cancelled: %s", batch_id, error)
        _fail_all(lines.values(), CallWithheld(f"left in batch {batch_id}: {why}"))


@dataclass(frozen=True)
class Lost:
    """What is known of a batch the provider does not know (its id on record, from another endpoint or key)."""

    id: str
    status: str = LOST
    total: int = 0
    completed: int = 0
    failed: int = 0


def _died_twice(status: str | None) -> PermanentJudgeError:
    return PermanentJudgeError(f"the judge's batch was {status or 'lost'} twice (sent again once): no answer")


def _fail_all(lines, error: JudgeError) -> None:
    for line in lines:
        line.settle(AttemptFailed(error))
