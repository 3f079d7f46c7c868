"""What a scoring run claims and counts, decided once at its start and handed
to every task that claims or counts for it (``tasks/claims.py``): which source
rows (its --since/--until range, sample rate and settle delay, read where its
:class:`~judgeflow.db.watermark.ReadPlan` says) and when a pair counts as done
(:class:`~judgeflow.db.pairs.Done`). Frozen and made of plain values, so a
Prefect task takes it as a parameter like any other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from judgeflow.db.pairs import Done
from judgeflow.db.watermark import ReadPlan
from judgeflow.sources.types import KeyFilter


@dataclass(frozen=True)
class ClaimFilters:
    since: datetime | None = None  # created_at >= since
    until: datetime | None = None  # created_at < until
    sample_rate: float = 1.0
    settle_delay_s: float = 0.0  # rows younger than this are not read yet
    # re-scoring: results written before this (the run's start) count as not done
    rescore_before: datetime | None = None
    # a pair this run has written is done for this run whatever its status, so a
    # second copy of a duplicate id never gets a second go
    run_started: datetime | None = None
    max_failed_runs: int | None = None  # None: every failed pair is retried
    # a nightly run leaves the traces a sample budget did not select to backfills
    not_sampled_done: bool = False
    plan: ReadPlan | None = None  # where the run reads; None: the whole source
    # a run without batches leaves a pair whose line is in a live batch to a batch run (Done.batch_window_s)
    batch_window_s: float | None = None
    # a run under a sample budget: the night it plans; its selected traces are claimed first (tasks/claims.py)
    sample_night: date | None = None

    @property
    def done(self) -> Done:
        return Done(run_started=self.run_started, max_failed_runs=self.max_failed_runs,
                    rescore_before=self.rescore_before, not_sampled_done=self.not_sampled_done,
                    batch_window_s=self.batch_window_s)

    def keys(self, *, lo: datetime | None = None, after: tuple[datetime, str] | None = None) -> KeyFilter:
        """The source keys the run reads from ``lo``, after the key ``after``."""
        return KeyFilter(lo=lo, since=self.since, until=self.until, settle_delay_s=self.settle_delay_s,
                         sample_rate=self.sample_rate, after=after)
