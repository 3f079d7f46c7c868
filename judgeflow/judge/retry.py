"""The retry policy, declared once: how often a judge request is sent again, at each of three levels
(:class:`Level`), each decided by :meth:`RetryPolicy.resend` and run by one loop.

* **Attempts per call** (:class:`CallRetry`): a judge call that failed on a
  transient error (429, 408/409/425, 5xx, a dropped connection, a timeout:
  :class:`~judgeflow.errors.TransientJudgeError`) is attempted again, at most
  ``max_retries`` more times, after ``uniform(0, min(backoff_max_s,
  backoff_base_s * 2**n))`` ("full jitter"), never sooner than the server's
  ``Retry-After``, which is honoured beyond ``backoff_max_s`` up to
  ``retry_after_max_s``; a server asking for longer is not waited for
  in-process. Any other error ends the call at once. The one loop:
  :func:`send_with_retries`, which both judges run (in the run's process,
  also when the attempts go to judge worker processes).
* **Runs per pair** (:attr:`RetryPolicy.pair_reruns`): a pair whose metric
  failed on a transient error once its calls gave up is run again after
  ``rerun_delay_s * 2**n``; the one loop is ``judge_pair`` (tasks/scoring.py).
* **Repair rounds per reply** (:attr:`RetryPolicy.repairs`): a reply that does
  not validate is re-asked with a correction; the one loop is
  ``judgeflow.metrics.steps.ask``.

So one judge request is sent at most ``(max_retries + 1) x (pair_reruns + 1)
x (repairs + 1)`` times (:meth:`RetryPolicy.worst_case_sends`).
:meth:`RetryPolicy.from_settings` is the only reader of the settings behind
it (``JUDGEFLOW_JUDGE_MAX_RETRIES``, ``_JUDGE_BACKOFF_BASE_S``,
``_JUDGE_BACKOFF_MAX_S``, ``_TASK_RETRIES``, ``_TASK_RETRY_DELAY_S``,
``_JUDGE_MAX_REPAIRS``); whoever needs a level is handed the policy.

Every attempt that was sent is counted by :class:`~judgeflow.judge.spend.CallSpend`
inside :func:`send_with_retries`, whichever judge sent it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable

from judgeflow.errors import CallWithheld, JudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeReply
from judgeflow.judge.send_gate import RequestPermits
from judgeflow.judge.spend import CallSpend, reply_tokens

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

RETRY_AFTER_MAX_S = 120.0
"""Longest server-requested ``Retry-After`` honoured in-process; above it the call gives up at once."""


def backoff_delay(attempt: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Full-jitter exponential backoff after failed attempt ``attempt`` (0-based):
    ``uniform(0, min(max_s, base_s * 2**attempt))``."""
    ceiling = min(max_s, base_s * (2.0 ** min(attempt, 60)))
    return (rng or random).uniform(0.0, max(0.0, ceiling))


def retry_delay(attempt: int, base_s: float, max_s: float, retry_after_s: float | None = None,
                rng: random.Random | None = None) -> float:
    """The sleep before the next attempt: the jittered backoff, but never less
    than the server's ``Retry-After`` (which may exceed ``max_s``)."""
    delay = backoff_delay(attempt, base_s, max_s, rng)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return delay


@dataclass(frozen=True)
class CallRetry:
    """Attempts per judge call (the module doc)."""

    max_retries: int = 4
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    retry_after_max_s: float = RETRY_AFTER_MAX_S

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("max_retries, backoff_base_s and backoff_max_s must be >= 0")

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    def plan(self, attempt: int, err: JudgeError, rng: random.Random) -> float | JudgeError:
        """After failed attempt ``attempt`` (0-based): the sleep before the next one, or the error to raise."""
        if not isinstance(err, TransientJudgeError):
            return err
        retry_after = err.retry_after_s
        if retry_after is not None and retry_after > self.retry_after_max_s:
            return TransientJudgeError(
                f"{err} (not waiting in-process: Retry-After {retry_after:g}s exceeds {self.retry_after_max_s:g}s)",
                retry_after_s=retry_after,
            )
        if attempt >= self.max_retries:
            final = TransientJudgeError(
                f"{err} (gave up after {attempt + 1} attempt{'s' if attempt else ''})", retry_after_s=retry_after,
            )
            final.status_code = getattr(err, "status_code", None)  # type: ignore[attr-defined]
            return final
        return retry_delay(attempt, self.backoff_base_s, self.backoff_max_s, retry_after, rng)


@dataclass(frozen=True)
class Retry:
    """Send again after ``after_s`` seconds."""

    after_s: float


@dataclass(frozen=True)
class GiveUp:
    """Do not send again: ``reason``; ``later``: not a failure, the work is left
    for later (a run's limits said no, not the judge)."""

    reason: str
    later: bool = False


@dataclass(frozen=True)
class RetryPolicy:
    """The three levels (the module doc), built from the settings by :meth:`from_settings` only."""

    call: CallRetry = field(default_factory=CallRetry)
    pair_reruns: int = 2
    rerun_delay_s: float = 2.0
    repairs: int = 2

    @classmethod
    def from_settings(cls, settings: "Settings") -> "RetryPolicy":
        """The one place the retry settings are read."""
        return cls(
            call=CallRetry(max_retries=int(settings.judge_max_retries),
                           backoff_base_s=float(settings.judge_backoff_base_s),
                           backoff_max_s=float(settings.judge_backoff_max_s)),
            pair_reruns=int(settings.task_retries),
            rerun_delay_s=float(settings.task_retry_delay_s),
            repairs=int(settings.judge_max_repairs),
        )

    def rerun(self, attempt: int, error: Exception) -> Retry | GiveUp:
        """The pair level's decision: whether a pair whose ``attempt``-th run
        (1-based) failed with ``error`` runs again, and after how long. Only a
        transient error runs again. The call level decides in
        :meth:`CallRetry.plan` (asked through :class:`Pace`, in whichever
        process sends the attempt); the repair level is the bound ``repairs``
        handed to the metrics."""
        if not isinstance(error, TransientJudgeError) or attempt > self.pair_reruns:
            return GiveUp(str(error))
        return Retry(self.rerun_delay_s * 2 ** (attempt - 1))

    def rerun_delays(self) -> list[float]:
        """The pause before each re-run of a pair: ``rerun_delay_s * 2**n``."""
        return [self.rerun_delay_s * 2**i for i in range(self.pair_reruns)]

    def worst_case_sends(self) -> int:
        """How often one judge request may be sent at most: attempts per call x
        runs per pair x rounds per reply."""
        return self.call.attempts * (self.pair_reruns + 1) * (self.repairs + 1)


@dataclass
class AttemptFailed:
    """One attempt that brought no reply: its error, what caused it (chained
    when raised, unless it is an HTTP error whose text may echo credentials),
    whether the request reached the provider (which bills it), and whether a
    judge worker handed it back unsent because the claims it went with were no
    longer fresh (the run's gate is asked again, and it is not counted)."""

    error: JudgeError
    cause: BaseException | None = None
    sent: bool = False
    handed_back: bool = False
    chain: bool = False


class Pace:
    """What paces one judge's attempts: a ``Retry-After`` starts a cool-down
    shared by every call of the judge (calls starting before it ends wait it
    out), and the jitter's random source."""

    def __init__(self, rng: random.Random | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.rng = rng or random.Random()
        self.sleep = sleep
        self._lock = threading.Lock()
        self._until = 0.0  # time.monotonic() before which no attempt starts

    def cool_down(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, time.monotonic() + seconds)

    def remaining(self) -> float:
        with self._lock:
            return self._until - time.monotonic()

    def plan(self, policy: CallRetry, attempt: int, err: JudgeError) -> float | JudgeError:
        retry_after = getattr(err, "retry_after_s", None)
        if retry_after is not None and retry_after <= policy.retry_after_max_s:
            self.cool_down(retry_after)
        with self._lock:
            return policy.plan(attempt, err, self.rng)


async def send_with_retries(attempt: Callable[[], Awaitable[JudgeReply | AttemptFailed]], *, policy: CallRetry,
                            spend: CallSpend, pace: Pace, permits: RequestPermits | None = None) -> JudgeReply:
    """The one loop over a call's attempts: until one answers, an error that
    is not transient, or ``policy.max_retries`` retries. Every attempt sent is
    counted on ``spend`` and carried by the reply, or by the error raised
    (``billed``). With an account limit (``permits``, the call's), each
    attempt first takes its request and tokens from it; a reply corrects the
    tokens by its usage, and a 429 makes every process of the account wait."""
    failures = 0
    tokens = spend.tokens if permits is not None else 0
    while True:
        wait = pace.remaining()
        if wait > 0:
            await pace.sleep(wait)
        if permits is not None:
            await permits.take(tokens)
        outcome = await attempt()
        if isinstance(outcome, JudgeReply):
            if permits is not None:
                permits.used(tokens, reply_tokens(outcome, tokens))
            return spend.answered(outcome)
        if outcome.sent:
            spend.unanswered()
        if permits is not None and getattr(outcome.error, "status_code", None) == 429:
            await permits.refused(getattr(outcome.error, "retry_after_s", None))
        if outcome.handed_back:
            continue  # not sent: it asks its gate again before it goes
        plan = outcome.error if isinstance(outcome.error, CallWithheld) else pace.plan(policy, failures,
                                                                                       outcome.error)
        if isinstance(plan, JudgeError):
            plan.billed = spend.billed
            if outcome.chain and outcome.cause is not None:
                raise plan from outcome.cause
            raise plan from None
        await pace.sleep(plan)
        failures += 1
