"""The figures of one rule, overall and per segment, straight from eval_results.

The window is by the trace's ``created_at`` (``eval_results.trace_created_at``):
results whose trace was created at or after ``now - window``. The baseline is
the period just before it, ``[window_start - baseline, window_start)``. Results
without a trace time are outside every window.

Segments come from ``eval_results.segment``: the values of the stored
segment keys (``JUDGEFLOW_ALERT_SEGMENT_BY``'s and each served metric's own),
copied there when the trace was scored (so counting a segment never touches
the customer's trace table); a rule counts the keys of its ``segment_by`` only.

An evaluation reads its counts once (:func:`read_evaluation_counts`,
judgeflow/db/rollup.py): every whole trace hour of every rule's periods from
``judgeflow.result_rollup``, and the hours a period boundary cuts from
``eval_results`` by its ``(metric, trace_created_at)`` index. Every rule and
segment key is folded from that one read (judgeflow/alerts/tally.py), which
ranks a key's values by volume and folds all but the top
``JUDGEFLOW_ALERT_SEGMENT_TOP`` into ``other``. The read carries each
result's sample class (night, stratum, inclusion probability), so sampled
periods get the same stratified estimate as from the results.

Only results of the judge epoch in force count (:mod:`judgeflow.db.epochs`): a
new judge model or metric version never mixes with the old one in a window or
a baseline. Results of earlier epochs in the periods are counted apart
(``other_epoch``): a rule short of samples because of them reports
``insufficient_data`` ("judge changed at ...") rather than plain
``not_enough_data``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, func, select, text

from judgeflow.alerts.rules import Rule
from judgeflow.alerts.corrected import Corrected, corrected_rate, labels_by_verdict
from judgeflow.alerts.estimates import Estimate, WeightedCounts, estimate
from judgeflow.alerts.stats import fisher_greater
from judgeflow.alerts.tally import Tally, ranked, tally
from judgeflow.sources.identity import of_source
from judgeflow.db.epochs import Epoch, current_epochs, in_epoch_sql, latest_start
from judgeflow.db.labels import LabelledItem, labelled_sample
from judgeflow.db.rollup import CountRow, read_counts
from judgeflow.metrics.registry import metric_names

WORST_LIMIT = 5
# the worst traces are chosen among this many of the window's latest bad results per metric
WORST_RECENT = 1000
# reasons are the judge's short explanations; cut them so a notification never
# carries much of a trace's text
REASON_CHARS = 300
# the segment every value outside a rule's top N is folded into
OTHER = "other"


@dataclass(frozen=True)
class Segment:
    """Overall (no key), one value of one metadata key, or the ``other`` group
    of a key (every value but ``named``)."""

    key: str | None = None
    value: str | None = None
    named: tuple[str, ...] = ()  # for the 'other' group: the values that have their own segment
    is_other: bool = False

    @property
    def overall(self) -> bool:
        return self.key is None

    def as_json(self) -> dict[str, str]:
        """``{}`` overall, else ``{key: value}``: the notification's ``segment``."""
        return {} if self.key is None else {self.key: self.value}

    @property
    def label(self) -> str:
        """A stable text key for the (rule, segment) row: '' overall, 'app=B'."""
        return "" if self.key is None else f"{self.key}={self.value}"

    def where(self) -> tuple[str, dict]:
        """The SQL condition selecting this segment's results, and its parameters."""
        if self.key is None:
            return "TRUE", {}
        if self.is_other:
            return (
                "(segment ->> :seg_key) IS NOT NULL"
                " AND NOT ((segment ->> :seg_key) = ANY(CAST(:seg_named AS text[])))",
                {"seg_key": self.key, "seg_named": list(self.named)},
            )
        return "(segment ->> :seg_key) = :seg_value", {"seg_key": self.key, "seg_value": self.value}


OVERALL = Segment()


@dataclass(frozen=True)
class WorstTrace:
    trace_id: str
    metric: str
    score: float | None
    reason: str | None
    trace_created_at: datetime | None

    def as_json(self) -> dict:
        data = asdict(self)
        data["trace_created_at"] = iso_utc(self.trace_created_at)
        return data


@dataclass(frozen=True)
class Figures:
    value: float | None  # the rate; None when the window holds no sample
    violations: int  # numerator: not-passed (or failed) results
    sample_size: int  # denominator
    failed: int  # failed scorings in the window (for a not-passed rate: beside it)
    worst: list[WorstTrace]
    evaluated_at: datetime
    window_start: datetime
    segment: Segment = OVERALL
    baseline_value: float | None = None
    baseline_violations: int = 0
    baseline_sample_size: int = 0
    baseline_start: datetime | None = None
    # one-sided Fisher's exact p-value of "the window's rate is above the
    # baseline's"; None when either period is empty
    p_value: float | None = None
    # the p-value Holm-adjusted over the rule's segments tested in the same
    # evaluation (judgeflow/alerts/lifecycle.py: correct_for_family), which the
    # decision compares with the alphas; None: not adjusted (a family of one)
    p_adjusted: float | None = None
    family_size: int = 1
    worst_loaded: bool = field(default=False, compare=False)
    # when the judge epoch counted here started (None: no epoch recorded), and
    # the results of earlier epochs left out of the window and of the baseline
    epoch_started_at: datetime | None = None
    other_epoch: int = 0
    other_epoch_baseline: int = 0
    # the rates as weighted estimates with their 95% intervals (judgeflow/alerts/estimates.py)
    estimate: Estimate | None = None
    baseline_estimate: Estimate | None = None
    # the window's rate corrected for the judge's error (judgeflow/alerts/corrected.py), when the
    # evaluation read the metric's labels; its reason says why it has no rate
    corrected: Corrected | None = None

    @property
    def ci_low(self) -> float | None:
        return self.estimate.ci_low if self.estimate else None

    @property
    def ci_high(self) -> float | None:
        return self.estimate.ci_high if self.estimate else None

    @property
    def decision_p(self) -> float | None:
        """The p-value the regression decision reads: adjusted for the family when it was."""
        return self.p_adjusted if self.p_adjusted is not None else self.p_value

    @property
    def increase(self) -> float | None:
        if self.value is None or self.baseline_value is None:
            return None
        return self.value - self.baseline_value


def iso_utc(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a 'Z', as every time in a notification is written."""
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if value else None


def _cut(text_: str | None) -> str | None:
    if text_ is None:
        return None
    text_ = " ".join(text_.split())
    return text_ if len(text_) <= REASON_CHARS else text_[: REASON_CHARS - 1] + "…"


def _conditions(rule: Rule) -> tuple[str, str]:
    """(counted, bad) as SQL over eval_results' columns."""
    if rule.kind in ("not_passed_rate", "regression"):
        # failed scorings are neither bad nor good; they are reported beside the rate
        return "status = 'scored'", "status = 'scored' AND passed IS NOT TRUE"
    if rule.kind == "failure_rate":
        return "status IN ('scored', 'failed')", "status = 'failed'"
    raise ValueError(f"unknown rule kind {rule.kind!r}")  # pragma: no cover - RuleKind is closed


def rule_metrics(rule: Rule) -> list[str]:
    # Always a condition on metric: eval_results' index is (metric, trace_created_at),
    # and a window over every metric would otherwise read the whole table.
    return [rule.metric] if rule.metric is not None else list(metric_names())


def _periods(rule: Rule, now: datetime) -> tuple[datetime, datetime]:
    start = now - timedelta(seconds=rule.window_s)
    return start, start - timedelta(seconds=rule.baseline_s)


def figures_from_counts(
    window: WeightedCounts, baseline: WeightedCounts, *, failed: int, evaluated_at: datetime,
    window_start: datetime, segment: Segment = OVERALL, baseline_start: datetime | None = None,
    epoch_started_at: datetime | None = None, other_epoch: int = 0, other_epoch_baseline: int = 0,
) -> Figures:
    """A rule's figures from the two periods' (weighted) counts: the rates are
    weighted estimates with 95% intervals, the regression's p-value is Fisher's
    test on their effective counts, the sample sizes are judged results
    (judgeflow/alerts/estimates.py). With every weight 1: the plain shares and counts."""
    now_est, base_est = estimate(window), estimate(baseline)
    return Figures(
        value=now_est.rate,
        violations=window.bad,
        sample_size=window.n,
        failed=failed,
        worst=[],
        evaluated_at=evaluated_at,
        window_start=window_start,
        segment=segment,
        baseline_value=base_est.rate,
        baseline_violations=baseline.bad,
        baseline_sample_size=baseline.n,
        baseline_start=baseline_start,
        p_value=(fisher_greater(now_est.eff_bad, now_est.eff_n, base_est.eff_bad, base_est.eff_n)
                 if window.n and baseline.n else None),
        epoch_started_at=epoch_started_at,
        other_epoch=other_epoch,
        other_epoch_baseline=other_epoch_baseline,
        estimate=now_est,
        baseline_estimate=base_est,
    )


def _figures(rule: Rule, t: Tally, segment: Segment, now: datetime, start: datetime, base_start: datetime,
             epoch_started_at: datetime | None = None, labelled: list[LabelledItem] | None = None) -> Figures:
    window = t.period("")
    figures = figures_from_counts(
        window, t.period("base_"), failed=t.failed, evaluated_at=now,
        window_start=start, segment=segment, baseline_start=base_start, epoch_started_at=epoch_started_at,
        other_epoch=t.other_epoch, other_epoch_baseline=t.other_base,
    )
    if labelled is None:
        return figures
    others = segment.named if segment.is_other else None
    labels = labels_by_verdict(labelled, segment.key, segment.value, others)
    return replace(figures, corrected=corrected_rate(window, *labels))


_OVERALL_ONLY = ("dead_deliveries", "unwritten_results")  # not rates of eval_results; overall only


@dataclass(frozen=True)
class Counts:
    """One read of the rollup for an evaluation (all its rules and segment
    keys), as of ``now``: every rule's figures come from it, with its own
    source's judge epochs in force (``epochs``: source -> metric -> epoch)."""

    now: datetime
    epochs: dict[str | None, dict[str, Epoch]]
    rows: list[CountRow]
    # (source, metric) -> the labelled results of the draws of its judge epoch in force, for the
    # metrics whose corrected rate was asked for (:func:`read_evaluation_counts`)
    labels: dict[tuple[str | None, str], list[LabelledItem]] = field(default_factory=dict)

    def figures(self, rule: Rule, *, key: str | None = None, keep: tuple[str, ...] = ()) -> list[Figures]:
        start, base_start = _periods(rule, self.now)
        epochs = self.epochs.get(rule.source, {})
        epoch_start = latest_start(epochs, rule_metrics(rule))
        labelled = self.labels.get((rule.source, rule.metric)) if rule.kind != "failure_rate" else None
        found = tally(self.rows, kind=rule.kind, metrics=rule_metrics(rule), source=rule.source, key=key,
                      start=start, base_start=base_start, epochs=epochs)
        if key is None:
            return [_figures(rule, found.get("", Tally()), OVERALL, self.now, start, base_start, epoch_start,
                             labelled)]
        groups = ranked(found, top=rule.segment_top, keep=keep, other=OTHER)
        named = tuple(value for value, grouped, _ in groups if not grouped)
        return [
            _figures(rule, t, Segment(key, value, named=named if grouped else (), is_other=grouped),
                     self.now, start, base_start, epoch_start, labelled)
            for value, grouped, t in groups
        ]


def read_labels(conn: Connection, wanted: set[tuple[str | None, str]],
                epochs: dict[str | None, dict[str, Epoch]]) -> dict[tuple[str | None, str], list[LabelledItem]]:
    """Per (source, metric): the labelled results of the draws made over every segment in the judge
    epoch in force (judgeflow/db/labels.py; labels count only for their epoch), pooled."""
    found = {}
    for source, metric in sorted(wanted, key=str):
        if source is None:
            continue
        epoch = epochs.get(source, {}).get(metric)
        draws = labelled_sample(conn, source, metric, epoch.id if epoch else None)
        found[(source, metric)] = [item for d in draws for item in d.items]
    return found


def read_evaluation_counts(
    conn: Connection, rules: list[Rule], *, now: datetime, epochs: dict[str, Epoch] | None = None,
    since: datetime | None = None, sources: list[str | None] | None = None, corrected: bool = False,
) -> Counts:
    """The one read every rule of ``rules`` is evaluated from at ``now`` (and,
    with ``since``, the hours from then on too, per UTC day: the trend's days;
    ``sources``: also the results of those sources). ``epochs``: the epochs in
    force for the rules' one source (default: each source's, read now). The labels
    of the metrics whose maximum rule decides on the corrected rate are read too
    (``corrected``: of every rule's metric, for the report)."""
    counted = [r for r in rules if r.kind not in _OVERALL_ONLY]
    rule_sources = {r.source for r in counted}
    by_source = ({s: epochs for s in rule_sources} if epochs is not None
                 else {s: current_epochs(conn, s) for s in rule_sources})
    bounds = [b for r in counted for b in _periods(r, now)]
    metrics = sorted({m for r in counted for m in rule_metrics(r)} or metric_names())
    start = min(bounds + ([since] if since is not None else []), default=now)
    rows = read_counts(conn, since=start, bounds=bounds, metrics=metrics,
                       sources=[r.source for r in counted] + list(sources or ()), by_day=since is not None)
    wanted = {(r.source, r.metric) for r in counted
              if r.metric is not None and (corrected or r.rate_on == "corrected")}
    return Counts(now, by_source, rows, read_labels(conn, wanted, by_source) if wanted else {})


def _overall_only_figures(conn: Connection, rule: Rule, now: datetime, start: datetime) -> Figures:
    """Dead deliveries (counted in the alert outbox) or results the Phoenix write-back left unwritten."""
    if rule.kind == "dead_deliveries":
        from judgeflow.alerts.dead_letters import dead_delivery_counts

        dead, ended, failing = dead_delivery_counts(conn, start=start, source=rule.source)
        # dead / ended in the window, 0 when nothing ended; failed: deliveries still being retried
        return Figures(value=dead / ended if ended else 0.0, violations=dead, sample_size=ended,
                       failed=failing, worst=[], evaluated_at=now, window_start=start, worst_loaded=True)
    from judgeflow.phoenix.outbox import stale_unwritten_counts

    # stale / unwritten, 0 when nothing is unwritten
    stale, unwritten = stale_unwritten_counts(conn, rule.source,
                                              stale_before=now - timedelta(seconds=rule.max_age_s or 0))
    return Figures(value=stale / unwritten if unwritten else 0.0, violations=stale, sample_size=unwritten,
                   failed=0, worst=[], evaluated_at=now, window_start=start, worst_loaded=True)


def segment_figures(
    conn: Connection, rule: Rule, *, now: datetime, key: str | None = None, keep: tuple[str, ...] = (),
    epochs: dict[str, Epoch] | None = None, counts: Counts | None = None,
) -> list[Figures]:
    """Figures overall (``key`` None: one) or per segment of ``key``: the top
    ``rule.segment_top`` values by volume (window + baseline), every value in
    ``keep`` (e.g. segments that are firing, so they can resolve), and ``other``
    for the rest, counting the results of the judge epochs in force
    (``epochs``, default: read now). ``counts``: the evaluation's one read
    (:func:`read_evaluation_counts`, at ``counts.now``), else one is made for
    this rule. Worst traces are not loaded (see :func:`with_worst`)."""
    if rule.kind in _OVERALL_ONLY:
        start, _ = _periods(rule, now)
        return [] if key is not None else [_overall_only_figures(conn, rule, now, start)]
    if counts is None:
        counts = read_evaluation_counts(conn, [rule], now=now, epochs=epochs)
    return counts.figures(rule, key=key, keep=keep)


def worst_traces(
    conn: Connection, rule: Rule, segment: Segment, window_start: datetime, epochs: dict[str, Epoch] | None = None
) -> list[WorstTrace]:
    """The segment's worst results in the window (of the judge epoch in force)
    among its latest :data:`WORST_RECENT` bad ones per metric: highest scores
    for a not-passed rate, latest failures for the failure rate; none for dead
    deliveries."""
    if rule.kind in ("dead_deliveries", "unwritten_results"):
        return []
    _, bad = _conditions(rule)
    seg_where, seg_params = segment.where()
    if epochs is None:
        epochs = current_epochs(conn, rule.source)
    in_epoch, epoch_params = in_epoch_sql(epochs, rule_metrics(rule))
    if rule.kind == "failure_rate":
        reason, order = "concat_ws(': ', error_kind, error)", "scored_at DESC, trace_id"
    else:
        reason, order = "reason", "score DESC NULLS LAST, trace_created_at DESC, trace_id"
    # the latest bad results of each metric first, backwards along the window
    # index and from it alone (every column the conditions read is in it), then
    # the worst of those read from the table: a window of millions is not read whole
    rows = conn.execute(
        text(
            f"""
            SELECT trace_id, metric, score, {reason} AS reason, trace_created_at
            FROM unnest(CAST(:metrics AS text[])) AS m(name) CROSS JOIN LATERAL (
                SELECT trace_id AS k_id, metric AS k_metric FROM judgeflow.eval_results
                WHERE metric = m.name AND trace_created_at >= :start AND {bad} AND {seg_where}
                  AND {in_epoch} AND {of_source()}
                ORDER BY trace_created_at DESC LIMIT :recent
            ) k
            JOIN judgeflow.eval_results r ON r.trace_id = k.k_id AND r.metric = k.k_metric
            ORDER BY {order} LIMIT :n
            """
        ),
        dict(seg_params, **epoch_params, metrics=rule_metrics(rule), start=window_start, n=WORST_LIMIT,
             recent=WORST_RECENT, source=rule.source),
    )
    return [WorstTrace(w.trace_id, w.metric, w.score, _cut(w.reason), w.trace_created_at) for w in rows]


def with_worst(conn: Connection, rule: Rule, figures: Figures) -> Figures:
    if figures.worst_loaded:
        return figures
    return replace(
        figures, worst=worst_traces(conn, rule, figures.segment, figures.window_start), worst_loaded=True
    )


def compute_figures(
    conn: Connection, rule: Rule, *, now: datetime | None = None, segment: Segment = OVERALL
) -> Figures:
    """One segment's figures (default overall) with its worst traces, as of
    ``now`` (default: the database's ``now()``)."""
    if now is None:
        now = conn.execute(select(func.now())).scalar_one()
    epochs = current_epochs(conn, rule.source)
    if segment.overall:
        figures = segment_figures(conn, rule, now=now, epochs=epochs)[0]
    else:
        found = [
            f for f in segment_figures(conn, rule, now=now, key=segment.key, keep=(segment.value,), epochs=epochs)
            if f.segment.value == segment.value
        ]
        start, base_start = _periods(rule, now)
        figures = found[0] if found else Figures(
            value=None, violations=0, sample_size=0, failed=0, worst=[], evaluated_at=now,
            window_start=start, segment=segment, baseline_start=base_start,
            epoch_started_at=latest_start(epochs, rule_metrics(rule)),
        )
    return with_worst(conn, rule, figures)


def all_segment_figures(
    conn: Connection, rule: Rule, *, now: datetime, keep: dict[str, tuple[str, ...]] | None = None,
    epochs: dict[str, Epoch] | None = None, counts: Counts | None = None,
) -> list[Figures]:
    """Overall first, then each ``rule.segment_by`` key's segments, all from one read."""
    keep = keep or {}
    if counts is None and rule.kind not in _OVERALL_ONLY:
        counts = read_evaluation_counts(conn, [rule], now=now, epochs=epochs)
    figures = segment_figures(conn, rule, now=now, epochs=epochs, counts=counts)
    for key in rule.segment_by:
        figures += segment_figures(conn, rule, now=now, key=key, keep=keep.get(key, ()), epochs=epochs,
                                   counts=counts)
    return figures
