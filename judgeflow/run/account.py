"""The account limit: requests and tokens per minute, held across every process on one Prefect API.

A provider's limit belongs to the account (the key), not to a run: every
process that sends with it (scoring runs, backfill, shadow, calibration,
shards) must stay under it together. Each limit is a Prefect global
concurrency limit with slot decay (a rate limit), created on first use
(:func:`ensure_account_limits`) and read by ``judgeflow status``:

* ``judgeflow-judge-rpm-<account>`` (``JUDGEFLOW_JUDGE_RPM``), in slots of
  1/100 of a request: Prefect floors the decay at every update of the limit,
  which would lose up to a slot each time; in hundredths that loss is nothing;
* ``judgeflow-judge-tpm-<account>`` (``JUDGEFLOW_JUDGE_TPM``), in tokens.

``<account>`` is whose limit it is (:func:`account_id`):
``JUDGEFLOW_JUDGE_ACCOUNT``, or a hash of the judge's endpoint and key, so two
keys on one Prefect API hold two limits, and the processes of one key one.
The key itself is never in a name.

Each acquisition is a call to the Prefect API, so a process takes a
**block** of permits at once (half a second of the account's rate) and
spends it locally, one permit per attempt sent (retries included), with up
to two more blocks fetched ahead. Permits not spent within :data:`HOLD_S` of being taken
expire. The shape of the limit keeps every minute under it, at any moment
and for any number of processes: in a window of 60 s, the sends are at most
the permits taken in the window and the :data:`HOLD_S` before it, which is
at most the limit's room (``burst``, two blocks) plus its decay over
60 + :data:`HOLD_S` seconds; the decay is set so that sum is the per-minute
figure. The steady rate is therefore ``(N - burst) * 60 / (60 + HOLD_S)``
per minute (about 95% of N at 600 RPM).

An acquisition never asks without room: a refused one costs the limit the
decay since its last update (Prefect records the refusal). So the room is
read first, or, by a process that has found itself alone on the limit,
reckoned from its own takes (:class:`_Reckoning`: one API call per block
instead of two or three, which on a busy API server is what held one or two
processes below the rate); a block fetched once the room has piled up (a
slow call) takes all of it, up to the burst, in the same call.

Tokens are taken at each request's estimate
(:func:`judgeflow.judge.spend.attempt_tokens`) and corrected by its usage: a
reply that used more leaves a debt the next request pays first, one that
used less leaves a credit (which expires with the block).

A 429 that still comes back (another client on the same key) sets the
shared limit's active slots past its room by the ``Retry-After`` time's
worth of decay: every process waits it out, not just the one refused.

A missing or unreachable Prefect API with a limit set is an error
(:class:`~judgeflow.errors.PrefectServerError`, one line): never a silent
fallback to no limit. Once a run has started, an API that stops answering
holds the run's pairs (none is sent without its permit): each one about to
start waits while one of them asks the API again, after 1, 2, 4... seconds
(at most :data:`PROBE_MAX_S` apart), and the run goes on when it answers. Past
:data:`OUTAGE_S` without an answer the account limit is gone for the run: the
pairs waiting are deferred with that reason, the run stops claiming, and it
says so in one line (:attr:`AccountLimit.gone`). The run's policy holds the account limit
(:attr:`judgeflow.run.policy.RunPolicy.account`) and hands its permits to the
judge through each pair's gate (:attr:`judgeflow.judge.send_gate.Call.permits`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

from judgeflow.errors import PrefectServerError, TransientJudgeError

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings
    from judgeflow.run.gate import Refusal

RPM_NAME, TPM_NAME = "judgeflow-judge-rpm", "judgeflow-judge-tpm"
REQUEST_SLOTS = 100  # slots per request (the module doc)
BLOCK_S = 0.5  # a block holds this long of the account's rate
HOLD_S = 2.0  # a block's permits expire this long after they were taken
COOL_DOWN_DEFAULT_S = 1.0  # a 429 without Retry-After
COOL_DOWN_MAX_S = 120.0
PROBE_FIRST_S, PROBE_MAX_S = 1.0, 15.0  # an unreachable API is asked again after 1, 2, 4 ... 15 s
OUTAGE_S = 300.0  # unreachable this long, the account limit is gone for the run (the module doc)
RECKON_TAKES = 4  # takes a process alone on the limit reckons between two reads of it (class _Reckoning)
RECKON_MARGIN = 0.05  # of a block: the reckoned room is short of the reckoning by this much

log = logging.getLogger("judgeflow.account")


@dataclass(frozen=True)
class RateShape:
    """One limit's shape in Prefect (the module doc): ``per_minute`` items, ``unit`` slots each."""

    name: str
    per_minute: int
    unit: int

    @property
    def block(self) -> int:
        """Items a process takes at once."""
        return max(1, math.ceil(self.per_minute * BLOCK_S / 60))

    @property
    def burst(self) -> int:
        """Items the limit holds room for: two blocks, never more than half the minute."""
        return max(1, min(2 * self.block, self.per_minute // 2))

    @property
    def limit_slots(self) -> int:
        return self.burst * self.unit

    @property
    def decay_per_s(self) -> float:
        """Slots freed per second: the minute's items past the burst, over the minute and a hold."""
        return (self.per_minute - self.burst) * self.unit / (60 + HOLD_S)

    @property
    def items_per_minute(self) -> float:
        """The steady rate the shape allows, in items per minute."""
        return self.decay_per_s * 60 / self.unit


def account_id(settings: "Settings") -> str:
    """Whose limit: ``JUDGEFLOW_JUDGE_ACCOUNT`` (letters, digits and dashes
    kept), or the first 12 hex digits of a SHA-256 of the judge's endpoint and
    key (the settings', else the provider's variables litellm reads), never the
    key itself."""
    if settings.judge_account:
        return re.sub(r"[^a-z0-9-]+", "-", settings.judge_account.lower()).strip("-")[:40] or "default"
    from judgeflow.config.key_transport import account_material

    return hashlib.sha256(account_material(settings).encode()).hexdigest()[:12]


def account_shapes(settings: "Settings") -> list[RateShape]:
    """The account's limits the settings set (none: no account limit)."""
    shapes = []
    if settings.judge_rpm or settings.judge_tpm:
        account = account_id(settings)
    if settings.judge_rpm:
        shapes.append(RateShape(f"{RPM_NAME}-{account}", int(settings.judge_rpm), REQUEST_SLOTS))
    if settings.judge_tpm:
        shapes.append(RateShape(f"{TPM_NAME}-{account}", int(settings.judge_tpm), 1))
    return shapes


def _unreachable(exc: BaseException) -> PrefectServerError:
    return PrefectServerError(
        f"JUDGEFLOW_JUDGE_RPM/TPM need the Prefect API, which holds the account limit for every process, "
        f"and it could not be reached ({type(exc).__name__}); check PREFECT_API_URL or unset the limits")


def ensure_account_limits(settings: "Settings") -> list[RateShape]:
    """Create the account's limits in Prefect when missing, or reshape them to
    these settings (idempotent: processes starting together agree). Raises
    :class:`PrefectServerError` when the API cannot be reached."""
    shapes = account_shapes(settings)
    if not shapes:
        return shapes
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.settings import get_current_settings

    if not get_current_settings().api.url:  # an ephemeral API would hold the limit for this process alone
        raise PrefectServerError("JUDGEFLOW_JUDGE_RPM/TPM need a Prefect API every process shares, and none "
                                 "is set: set PREFECT_API_URL (or run through `judgeflow`, which starts one)")

    try:
        with get_client(sync_client=True) as client:
            for shape in shapes:
                try:
                    client.upsert_global_concurrency_limit_by_name(
                        shape.name, shape.limit_slots, slot_decay_per_second=shape.decay_per_s)
                except ObjectAlreadyExists:  # another process created it between the read and the create
                    client.upsert_global_concurrency_limit_by_name(
                        shape.name, shape.limit_slots, slot_decay_per_second=shape.decay_per_s)
    except Exception as exc:
        raise _unreachable(exc) from None
    return shapes


class _Block:
    """One process's permits of one limit, taken from Prefect a block at a time.
    Each block keeps its own expiry (its permits are spent within :data:`HOLD_S`
    of being taken, or never), and the next blocks (two at most, the limit's
    room) are fetched while the last is spent, so an API call's latency does
    not stop the sends."""

    def __init__(self, shape: RateShape,
                 acquire: Callable[[RateShape, int, int], Awaitable[tuple[int, float]]]) -> None:
        self.shape, self._acquire = shape, acquire
        self._held: deque[list[float]] = deque()  # [expires at (monotonic), items left] per block, oldest first
        self.debt = 0.0  # items used past what was taken (usage above the estimate): paid first
        self._locks: dict[int, asyncio.Lock] = {}
        self._guard = threading.Lock()
        self._refills: list[asyncio.Task] = []  # blocks being fetched ahead

    @property
    def balance(self) -> float:
        """Items in hand less the debt (expired blocks still counted until the next take)."""
        return sum(items for _, items in self._held) - self.debt

    def _lock(self) -> asyncio.Lock:
        loop = id(asyncio.get_running_loop())
        with self._guard:
            return self._locks.setdefault(loop, asyncio.Lock())

    def _available(self) -> float:
        now = time.monotonic()
        while self._held and self._held[0][0] <= now:
            self._held.popleft()
        return sum(items for _, items in self._held) - self.debt

    async def _fetch(self, items: int, most: int | None = None) -> None:
        """``items``, or up to ``most`` when the limit's room holds them (one API call, not two)."""
        unit = self.shape.unit
        got, sent = await self._acquire(self.shape, items * unit, max(items, most or items) * unit)
        # the hold runs from the request that took them: Prefect counted them before its reply came back
        self._held.append([sent + HOLD_S, float(got // unit)])

    def _spend(self, items: float) -> None:
        owed = items + self.debt
        self.debt = 0.0
        while owed > 0 and self._held:
            used = min(owed, self._held[0][1])
            self._held[0][1] -= used
            owed -= used
            if self._held[0][1] <= 0:
                self._held.popleft()
        self.debt = owed

    def _refilling(self) -> list[asyncio.Task]:
        loop = asyncio.get_running_loop()
        self._refills = [t for t in self._refills if not t.done() and t.get_loop() is loop]
        return self._refills

    async def take(self, items: float) -> None:
        async with self._lock():
            while self._available() < items:
                if self._refilling():
                    await asyncio.wait(self._refills, return_when=asyncio.FIRST_COMPLETED)
                    continue
                short = math.ceil(items - self._available())
                # what the room has piled up while no block was fetched (a slow API call) is taken at once
                await self._fetch(min(self.shape.burst, max(self.shape.block, short)), self.shape.burst)
            self._spend(items)
            # up to two blocks on their way while these are spent: an acquisition may take longer than a
            # block lasts (two API calls, on a busy Prefect server), and the limit has room for two
            while (len(self._refilling()) < 2
                   and self._available() + len(self._refills) * self.shape.block < 2 * self.shape.block):
                task = asyncio.get_running_loop().create_task(self._fetch(self.shape.block))
                task.add_done_callback(_quiet)
                self._refills.append(task)

    def correct(self, items: float) -> None:
        """A reply's usage against its estimate: a credit (for the newest block) or a debt."""
        if items < 0:
            self.debt -= items
        elif self._held:
            self._held[-1][1] += items
        else:
            self._held.append([time.monotonic() + HOLD_S, items])

    def drop(self) -> None:
        """The permits in hand are not sent (a 429 said the account is out)."""
        self._held.clear()


class _Reckoning:
    """One limit's room as this process reckons it without asking the API:
    the active slots its last take left, decayed since (Prefect decays them
    the same way, from its own update time: somewhere between the request and
    its reply, taken as the middle). Trusted (``alone``) only after a read
    found the limit where the reckoning put it (no other process took from it
    in between), and until an increment is refused; read again every
    :data:`RECKON_TAKES` takes, so its error (a request's latency's worth of
    decay at most, either way) does not pile up, and short of it by
    :data:`RECKON_MARGIN` of a block. Its own acquisitions in flight
    (``pending``) count as taken."""

    def __init__(self, shape: RateShape) -> None:
        self.shape = shape
        self.limit = shape.limit_slots
        self.active: float | None = None  # after this process's last take or read, at ``at``
        self.at = 0.0
        self.alone = False
        self.pending = 0
        self.takes = 0  # reckoned takes since the last read

    def _reckoned(self, now: float) -> float | None:
        if self.active is None:
            return None
        return max(0.0, self.active - self.shape.decay_per_s * (now - self.at))

    def room(self, now: float) -> float | None:
        """The room reckoned now, or None: read the limit."""
        active = self._reckoned(now) if self.alone and self.takes < RECKON_TAKES else None
        if active is None:
            return None
        return self.limit - active - self.pending - RECKON_MARGIN * self.shape.block * self.shape.unit

    def read(self, limit: int, active: float, now: float) -> float:
        """The limit as read: its room, and whether it is where this process's takes left it."""
        reckoned = self._reckoned(now)
        # another process's take is a block at least: more than the reckoning's error
        self.alone = reckoned is not None and active <= reckoned + self.shape.block * self.shape.unit / 2
        self.limit, self.active, self.at, self.takes = limit, float(active) + self.pending, now, 0
        return limit - active - self.pending

    def took(self, slots: int, now: float) -> None:
        reckoned = self._reckoned(now)
        self.active, self.at = (reckoned or 0.0) + slots, now
        self.takes += 1


def _quiet(task: asyncio.Task) -> None:
    # a failed prefetch is seen again by the next take, which fetches itself and raises
    if not task.cancelled():
        task.exception()


class AccountLimit:
    """The account's limits as one process uses them: the run policy's
    ``account`` (:class:`judgeflow.run.policy.AccountLimit`) and the judge's
    :class:`~judgeflow.judge.send_gate.RequestPermits`."""

    def __init__(self, shapes: list[RateShape], *, outage_s: float = OUTAGE_S) -> None:
        self.shapes = shapes
        self._blocks = {shape.name: _Block(shape, self._acquire) for shape in shapes}
        self._cooling_until = 0.0
        self.failure: BaseException | None = None  # the API's last failure, while it has not answered again
        self.acquired = 0  # acquisitions from Prefect (each an API call)
        self._clients: dict[int, object] = {}
        self.cooled_at: float | None = None  # time.time() the API last took a cool-down of this process's
        self.outage_s = outage_s
        self._down_since: float | None = None  # time.monotonic() of the first failure of this outage
        self._probing: dict[int, asyncio.Lock] = {}  # one probe at a time per event loop
        self.outages = 0  # outages the API came back from
        self._reckonings: dict[str, _Reckoning] = {}
        self.gone: "Refusal | None" = None  # unreachable for outage_s: the run has no account limit left

    async def why_not(self) -> "Refusal | None":
        """None while the API answers; while it does not, the pair waits for it (the module doc)."""
        if self.gone is not None:
            return self.gone
        if self.failure is not None:
            return await self._recovered()
        return None

    def _failed(self, exc: BaseException) -> None:
        self.failure = exc
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("the account limit's Prefect API could not be reached (%s): pairs wait for it, asking "
                        "again after %.0f s, then longer, for up to %.0f s", type(exc).__name__, PROBE_FIRST_S,
                        self.outage_s)

    async def _recovered(self) -> "Refusal | None":
        """Wait for the API to answer again: one probe at a time (the others wait on it), after
        1, 2, 4 ... s; None once it answers, the run's one refusal if it never does within ``outage_s``."""
        loop = id(asyncio.get_running_loop())
        async with self._probing.setdefault(loop, asyncio.Lock()):
            delay = PROBE_FIRST_S
            while self.failure is not None and self.gone is None:
                down_for = time.monotonic() - (self._down_since or time.monotonic())
                if down_for >= self.outage_s:
                    self._give_up(down_for)
                    break
                await asyncio.sleep(min(delay, self.outage_s - down_for))
                delay = min(delay * 2, PROBE_MAX_S)
                await self._probe()
        return self.gone

    async def _probe(self) -> None:
        """Read a limit (it changes nothing): an answer ends the outage."""
        self._clients.pop(id(asyncio.get_running_loop()), None)  # a new connection, not the broken one's
        try:
            client = await self._client()
            await client.read_global_concurrency_limit_by_name(self.shapes[0].name)
        except Exception as exc:
            self.failure = exc
            return
        log.warning("the account limit's Prefect API answers again after %.1f s: pairs go on",
                    time.monotonic() - (self._down_since or time.monotonic()))
        self.failure, self._down_since = None, None
        self.outages += 1

    def _give_up(self, down_for: float) -> None:
        from judgeflow.run.gate import Refusal

        self.gone = Refusal("account", f"the account limit's Prefect API has not answered for {down_for:.0f} s "
                                       f"({type(self.failure).__name__}): no judge call is sent without its "
                                       "limit; the rest is left for the next run")
        log.error("%s", self.gone.why)

    async def take(self, tokens: int) -> None:
        if self.failure is not None:
            refusal = await self._recovered()
            if refusal is not None:
                raise TransientJudgeError(refusal.why)
        for name, block in self._blocks.items():
            await block.take(1 if name.startswith(RPM_NAME) else tokens)

    def used(self, estimated: int, tokens: int) -> None:
        for name, block in self._blocks.items():
            if name.startswith(TPM_NAME):
                block.correct(estimated - tokens)

    async def refused(self, retry_after_s: float | None) -> None:
        wait = min(COOL_DOWN_MAX_S, retry_after_s if retry_after_s else COOL_DOWN_DEFAULT_S)
        for block in self._blocks.values():
            block.drop()
        if time.monotonic() + wait <= self._cooling_until:
            return  # this process set a cool-down as long already
        self._cooling_until = time.monotonic() + wait
        shape = self.shapes[0]
        from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

        full = shape.limit_slots + math.ceil(shape.decay_per_s * wait)
        try:
            client = await self._client()
            await client.update_global_concurrency_limit(shape.name, GlobalConcurrencyLimitUpdate(active_slots=full))
            self.cooled_at = time.time()  # from now every process sees the limit full
        except Exception as exc:
            self._failed(exc)
            raise TransientJudgeError(str(_unreachable(exc))) from None

    async def _client(self):
        """This event loop's Prefect client, opened once: each acquisition is then one or two requests."""
        from prefect.client.orchestration import get_client

        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None:
            client = get_client()
            await client.__aenter__()  # lives as long as the loop: the process's judge loop
            self._clients[id(loop)] = client
        return client

    async def _acquire(self, shape: RateShape, slots: int, most: int) -> tuple[int, float]:
        """At least ``slots`` of ``shape``'s limit and up to ``most`` when its
        room holds them, waiting for them; returns the slots taken and the
        ``time.monotonic()`` the request that took them was sent. A refused
        acquisition restarts Prefect's decay of the limit (the time since its
        last update is lost), so none is tried without room: the room is read
        from the limit (which changes nothing), or, while this process has
        found the limit as its own takes left it (no other process taking),
        reckoned from its own last take and the decay (:class:`_Reckoning`),
        which saves the read: one API call per block, not two or three."""
        reckoning = self._reckonings.setdefault(shape.name, _Reckoning(shape))
        try:
            client = await self._client()
            while True:
                room = reckoning.room(time.monotonic())
                if room is None:
                    limit = await client.read_global_concurrency_limit_by_name(shape.name)
                    room = reckoning.read(limit.limit, limit.active_slots, time.monotonic())
                if room < slots:
                    await asyncio.sleep((slots - room) / shape.decay_per_s + random.uniform(0, 0.05))
                    continue
                take = int(min(most, room))
                reckoning.pending += take
                sent = time.monotonic()
                try:
                    taken = await _increment(client, shape.name, take)
                finally:
                    reckoning.pending -= take
                if taken:
                    self.acquired += 1
                    # Prefect updated the limit while the request was out: reckoned from the middle
                    reckoning.took(take, (sent + time.monotonic()) / 2)
                    return take, sent
                reckoning.alone = False  # another process took the room: read the limit again
        except Exception as exc:
            self._failed(exc)
            raise TransientJudgeError(str(_unreachable(exc))) from None


async def _increment(client, name: str, slots: int) -> bool:
    """One acquisition: False when the limit had no room (another process took it first)."""
    from httpx import HTTPStatusError

    try:
        await client.increment_concurrency_slots(names=[name], slots=slots, mode="rate_limit")
        return True
    except HTTPStatusError as exc:
        if exc.response.status_code == 423:
            return False
        raise


_LIMITS: dict[tuple, AccountLimit] = {}
_LIMITS_LOCK = threading.Lock()


def account_limit(settings: "Settings") -> AccountLimit | None:
    """This process's account limit for ``settings`` (None: neither RPM nor
    TPM set), created in Prefect on first use; one per process and shape, so
    every run of the process spends the same blocks."""
    shapes = account_shapes(settings)
    if not shapes:
        return None
    key = tuple(shapes)
    with _LIMITS_LOCK:
        if key in _LIMITS:
            return _LIMITS[key]
    ensure_account_limits(settings)
    with _LIMITS_LOCK:
        return _LIMITS.setdefault(key, AccountLimit(shapes))


def account_label(settings: "Settings") -> str:
    """Whose limit, in words for ``judgeflow status``."""
    if settings.judge_account:
        return f"JUDGEFLOW_JUDGE_ACCOUNT={settings.judge_account}"
    return "the judge's endpoint and key (their hash; set JUDGEFLOW_JUDGE_ACCOUNT to name it)"


def account_status(settings: "Settings") -> list[dict]:
    """The account's limits as Prefect holds them now, for ``judgeflow status``
    (reads only: a limit not created yet says so). Raises
    :class:`PrefectServerError` when the API cannot be reached."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    rows = []
    try:
        with get_client(sync_client=True) as client:
            for shape in account_shapes(settings):
                row = {"name": shape.name, "account": account_label(settings), "per_minute": shape.per_minute,
                       "slots_per_item": shape.unit,
                       "steady_per_minute": round(shape.items_per_minute, 1), "created": False}
                try:
                    limit = client.read_global_concurrency_limit_by_name(shape.name)
                except ObjectNotFound:
                    rows.append(row)
                    continue
                row.update(created=True, limit=limit.limit, slot_decay_per_second=limit.slot_decay_per_second,
                           active_slots=limit.active_slots, active=limit.active)
                rows.append(row)
    except Exception as exc:
        raise _unreachable(exc) from None
    return rows
