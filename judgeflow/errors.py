"""The few error types judgeflow raises, all rooted at :class:`JudgeflowError`.

Lower layers (litellm, psycopg, SQLAlchemy, pydantic) raise their own errors;
they are translated into these at the edge that calls them, so callers only
ever need to know this hierarchy.
"""

from __future__ import annotations


class JudgeflowError(Exception):
    """Root of every error judgeflow raises on purpose.

    ``billed``: what the judge calls made before the error cost, when a metric
    raised it part-way (a ``judgeflow.metrics.steps.Usage``; None otherwise):
    the provider bills those calls whether or not the score is finished."""

    billed = None


class ConfigError(JudgeflowError):
    """Settings, parameters or identifiers that cannot be used as given."""


class MetricError(ConfigError):
    """A metric that cannot be used as named or declared: not registered, or a
    metrics file's table that cannot be read (docs/metrics.md explains both)."""


class InvalidTraceError(JudgeflowError):
    """A trace row that cannot be scored as it stands (e.g. null output)."""


class JudgeError(JudgeflowError):
    """The judge could not produce a usable answer."""


class TransientJudgeError(JudgeError):
    """Worth retrying later: rate limits, 5xx, timeouts, dropped connections."""

    def __init__(self, message: str, *, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentJudgeError(JudgeError):
    """Retrying the same request cannot help: 400, 401, context window exceeded."""


class CallWithheld(JudgeError):
    """A judge call was not sent: the run no longer owns the pair it was for
    (judgeflow/judge/send_gate.py). ``billed``: what the call's earlier
    attempts cost."""


class InvalidJudgeReplyError(JudgeError):
    """The judge answered, but not with JSON valid against the step's schema.

    Raised only after the bounded repair attempts are used up; ``raw`` holds the
    last reply verbatim so it can be stored and inspected.
    """

    def __init__(self, message: str, *, step: str, raw: str, attempts: int):
        super().__init__(message)
        self.step = step
        self.raw = raw
        self.attempts = attempts


class JudgeAbstained(JudgeError):
    """The judge declines to score this input (e.g. the offline judge has no
    context to check a hallucination against). Metrics turn it into a
    'skipped' result rather than a failure."""


class DatabaseError(JudgeflowError):
    """The database is unreachable or rejected an operation."""


class PrefectServerError(JudgeflowError):
    """judgeflow's local Prefect server could not be started or reached."""
