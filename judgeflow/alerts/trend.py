"""The trend people look at: per-day not-passed rates of each metric, overall and
for the top segments, with the change of the current window against its
baseline period. One computation, two renderings: markdown with an inline SVG
chart for the Prefect artifact, plain text with sparklines for ``judgeflow report``.

The SVG is embedded as a ``data:image/svg+xml;base64`` image: the Prefect UI's
markdown renderer shows it as a picture (checked in headless Chromium, see
tests/alerts/test_trend.py and the README) and it needs no file server. The
table beside it carries the same figures with unicode sparklines, for readers
whose client does not show images.

Where a judge epoch started (:mod:`judgeflow.db.epochs`: a new judge model or
metric version) is marked in both: a dashed line in the chart, a ``^`` under
that day in the table, and the epochs listed below it. The per-day rates show
every result (each day's judge); the change against the baseline counts only
the epoch in force, as the regression rules do.
"""

from __future__ import annotations

import base64
import math
import html
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Connection, func, select

from judgeflow.alerts.corrected import Corrected, VerdictLabels, corrected_rate, labels_by_verdict
from judgeflow.alerts.estimates import Estimate, WeightedCounts, estimate
from judgeflow.alerts.evaluation import Figures, read_evaluation_counts
from judgeflow.alerts.rules import all_rules
from judgeflow.sources.identity import result_source
from judgeflow.db.epochs import Epoch, epoch_history, when
from judgeflow.db.rollup import CountRow
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import reported, unit_of

SPARKS = "▁▂▃▄▅▆▇█"
NO_DATA = "·"
TOP_SEGMENTS = 5  # per key, besides overall
# a sparkline has at most this many characters: a longer period gives each several days
MAX_BUCKETS = 60
NO_LABELS_READ = "no labels read"
BEFORE_EPOCH = "the day began before the judge epoch in force; labels count only for their epoch"
COLOURS = ("#1f2937", "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2")


@dataclass
class Series:
    """One line of the trend: a metric overall or in one segment."""

    metric: str
    segment: dict[str, str]
    days: list[tuple[int, int]]  # (not passed, scored) per day, oldest first: judged results
    change: Figures | None = None  # window vs baseline
    # per day, the judged results with their sample weights (None: every weight 1)
    weights: list[WeightedCounts] | None = None
    # the line's labels by verdict (fail, pass) in the judge epoch in force, and when that epoch
    # started: a day's corrected rate uses them for the days wholly in it (judgeflow/alerts/corrected.py)
    labels: tuple[VerdictLabels, VerdictLabels] | None = None
    epoch_start: datetime | None = None

    @property
    def label(self) -> str:
        return "overall" if not self.segment else ", ".join(f"{k}={v}" for k, v in self.segment.items())

    @property
    def estimates(self) -> list[Estimate]:
        """Per day, the weighted not-passed rate with its 95% interval."""
        counts = self.weights or [WeightedCounts.unweighted(n, bad) for bad, n in self.days]
        return [estimate(c) for c in counts]

    @property
    def rates(self) -> list[float | None]:
        return [e.rate for e in self.estimates]

    def bucket_rates(self, size: int) -> list[float | None]:
        """The rate of each bucket of ``size`` days (:func:`buckets`), from the bucket's counts."""
        counts = self.weights or [WeightedCounts.unweighted(n, bad) for bad, n in self.days]
        return [estimate(_sum_counts([counts[i] for i in days])).rate for days in buckets(len(counts), size)]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.days)

    def corrected_days(self, dates: list[date]) -> list[Corrected]:
        """Per day, its rate corrected for the judge's error; none for a day that began before the
        judge epoch in force (labels count only for their epoch: the day's results may be another's)."""
        counts = self.weights or [WeightedCounts.unweighted(n, bad) for bad, n in self.days]
        out = []
        for d, c in zip(dates, counts):
            start = datetime.combine(d, datetime.min.time(), tzinfo=timezone.utc)
            if self.labels is None:
                out.append(Corrected(None, None, None, 0, NO_LABELS_READ))
            elif self.epoch_start is not None and start < self.epoch_start:
                out.append(Corrected(None, None, None, 0, BEFORE_EPOCH))
            else:
                out.append(corrected_rate(c, *self.labels))
        return out


@dataclass
class Trend:
    since: date
    until: date  # inclusive: today (UTC)
    window: str
    baseline: str
    series: list[Series] = field(default_factory=list)
    # the judge epochs in force during the period, oldest first
    epochs: list[Epoch] = field(default_factory=list)
    # the metrics shown, in order: every metric served, and each trace metric's session rate that has
    # results in the period
    metrics: list[str] = field(default_factory=list)

    @property
    def dates(self) -> list[date]:
        return [self.since + timedelta(days=i) for i in range((self.until - self.since).days + 1)]

    def for_metric(self, metric: str) -> list[Series]:
        return [s for s in self.series if s.metric == metric]

    def epochs_of(self, metric: str) -> list[Epoch]:
        return [e for e in self.epochs if e.metric == metric]

    def epoch_days(self, metric: str) -> dict[int, list[Epoch]]:
        """Day index -> the epochs of ``metric`` that started that day (within the period)."""
        days: dict[int, list[Epoch]] = {}
        for e in self.epochs_of(metric):
            day = e.started_at.astimezone(timezone.utc).date()
            if self.since <= day <= self.until:
                days.setdefault((day - self.since).days, []).append(e)
        return days


def days_per_bucket(n_days: int) -> int:
    """Days per sparkline character: one, or as many as keep the line within MAX_BUCKETS."""
    return max(1, math.ceil(n_days / MAX_BUCKETS))


def buckets(n_days: int, size: int) -> list[range]:
    """The day indexes of each bucket, oldest first; the newest bucket ends today, the oldest may be short."""
    first = n_days % size or size
    return [range(0, first)] + [range(i, i + size) for i in range(first, n_days, size)]


def _sum_counts(counts: list[WeightedCounts]) -> WeightedCounts:
    return WeightedCounts(
        n=sum(c.n for c in counts), bad=sum(c.bad for c in counts), sum_w=math.fsum(c.sum_w for c in counts),
        sum_w_bad=math.fsum(c.sum_w_bad for c in counts), sum_w2=math.fsum(c.sum_w2 for c in counts),
    )


def compute_trend(
    conn: Connection,
    settings: Settings,
    *,
    days: int = 14,
    segment_keys: tuple[str, ...] | None = None,
    now: datetime | None = None,
    top: int = TOP_SEGMENTS,
) -> Trend:
    """Per-day rates over the last ``days`` days (UTC days, today included) for
    each metric overall and its ``top`` segments by volume of each key in
    ``segment_keys`` (default: the keys the metric's rules segment by, its own
    ``segment_by`` or ``JUDGEFLOW_ALERT_SEGMENT_BY``), and each line's
    current window against its baseline (the regression rules' periods)."""
    if now is None:
        now = conn.execute(select(func.now())).scalar_one()
    until = now.astimezone(timezone.utc).date()
    since = until - timedelta(days=days - 1)
    start = datetime.combine(since, datetime.min.time(), tzinfo=timezone.utc)
    trend = Trend(since=since, until=until, window=settings.alert_window, baseline=settings.regression_baseline)
    trend.epochs = epoch_history(conn, result_source(settings), since=start)
    index = {d: i for i, d in enumerate(trend.dates)}
    rules = {r.metric: r for r in all_rules(settings) if r.kind == "regression"}

    source = result_source(settings)  # the configured source's results only
    # one read: the days of every line, and each line's window against its baseline
    counts = read_evaluation_counts(conn, list(rules.values()), now=now, since=start, sources=[source],
                                    corrected=True)
    lines = _per_day(counts.rows, start, index, source)
    empty = [WeightedCounts()] * len(index)
    rates = {name for name, spec in reported().items() if spec.rate_of is not None}
    trend.metrics = [m for m in reported() if m not in rates or (m, "", "") in lines]
    for metric in trend.metrics:
        days_ = lines.get((metric, "", ""), empty)
        change = counts.figures(rules[metric])[0]
        labelled = counts.labels.get((source, metric))
        epoch = counts.epochs.get(source, {}).get(metric)
        series = _series(metric, {}, days_, change, labelled, epoch.started_at if epoch else None)
        trend.series.append(series)
        for key in rules[metric].segment_by if segment_keys is None else segment_keys:
            by_value = {v: d for (m, k, v), d in lines.items() if m == metric and k == key}
            chosen = sorted(by_value, key=lambda v: (-sum(c.n for c in by_value[v]), v))[:top]
            changes = {f.segment.value: f for f in counts.figures(rules[metric], key=key, keep=tuple(chosen))}
            for value in chosen:
                trend.series.append(_series(metric, {key: value}, by_value[value], changes.get(value), labelled,
                                            series.epoch_start))
    return trend


def _series(metric: str, segment: dict[str, str], days: list[WeightedCounts], change: Figures | None,
            labelled: list | None = None, epoch_start: datetime | None = None) -> Series:
    key, value = next(iter(segment.items()), (None, None))
    labels = None if labelled is None else labels_by_verdict(labelled, key, value)
    return Series(metric, segment, [(c.bad, c.n) for c in days], change, days, labels, epoch_start)


def _per_day(rows: list[CountRow], start: datetime, index: dict[date, int],
             source: str) -> dict[tuple[str, str, str], list[WeightedCounts]]:
    """Per (metric, segment key, value; '' overall) and UTC day, every epoch: judged
    results, bad ones and their weight sums (the read gives lines within one UTC day)."""
    # sparse per line (a century of days has few with results), made dense at the end
    # from one shared empty cell: building a cell per day per line took seconds
    sums: dict[tuple[str, str, str], dict[int, list]] = {}
    for r in rows:
        if r.lo < start or r.source not in (source, None) or r.n == 0:
            continue
        day = r.lo.astimezone(timezone.utc).date()
        if day not in index:  # traces dated in the future
            continue
        line = sums.setdefault((r.metric, r.seg_key, r.seg_value), {})
        if r.status != "scored":
            continue
        cell, w = line.setdefault(index[day], [0, 0, [], [], []]), 1.0 / r.prob
        bad = r.passed is not True
        cell[0] += r.n
        cell[1] += r.n if bad else 0
        cell[2].append(r.n * w)
        cell[3].append(r.n * w if bad else 0.0)
        cell[4].append(r.n * w * w)
    empty = WeightedCounts()
    dense: dict[tuple[str, str, str], list[WeightedCounts]] = {}
    for key, cells in sums.items():
        days = [empty] * len(index)
        for i, (n, b, w, wb, w2) in cells.items():
            if n:
                days[i] = WeightedCounts(n, b, math.fsum(w), math.fsum(wb), math.fsum(w2))
        dense[key] = days
    return dense


# --- rendering -------------------------------------------------------------------


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}%}"


def _signed_pts(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f} pts"


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def sparkline(rates: list[float | None], top: float) -> str:
    """One character per day on a 0..``top`` scale; ``·`` for a day without results."""
    chars = []
    for rate in rates:
        if rate is None:
            chars.append(NO_DATA)
        elif top <= 0:
            chars.append(SPARKS[0])
        else:
            chars.append(SPARKS[min(len(SPARKS) - 1, int(rate / top * (len(SPARKS) - 1) + 0.5))])
    return "".join(chars)


def _scale(series: list[Series], size: int = 1) -> float:
    return max([r for s in series for r in s.bucket_rates(size) if r is not None], default=0.0)


def _rows(trend: Trend, metric: str) -> list[list[str]]:
    series = trend.for_metric(metric)
    size = days_per_bucket(len(trend.dates))
    top = _scale(series, size)
    rows = []
    for s in series:
        c = s.change
        rows.append([
            s.label,
            sparkline(s.bucket_rates(size), top),
            _pct(next((r for r in reversed(s.rates) if r is not None), None)),
            _with_interval(c),
            _corrected_cell(c.corrected if c else None),
            _pct(c.baseline_value if c else None),
            _signed_pts(c.increase if c else None),
            _p(c.p_value if c else None),
            f"{c.sample_size if c else 0} / {c.baseline_sample_size if c else 0}",
            _traffic(c),
        ])
    return rows


def epoch_marks(trend: Trend, metric: str) -> str:
    """The sparkline's row of epoch starts: ``^`` under the day (or bucket of days) a judge epoch started."""
    days = trend.epoch_days(metric)
    n = len(trend.dates)
    return "".join("^" if any(i in days for i in bucket) else " " for bucket in buckets(n, days_per_bucket(n)))


def epoch_lines(trend: Trend, metric: str) -> list[str]:
    """One line per epoch of ``metric`` in force during the period."""
    first = datetime.combine(trend.since, datetime.min.time(), tzinfo=timezone.utc)
    return [
        f"judge epoch {'started ' + when(e.started_at) if e.started_at >= first else 'in force since ' + when(e.started_at)}: "
        f"{e.metric_version} judged by {e.judge_model}"
        for e in trend.epochs_of(metric)
    ]


def headers(trend: Trend) -> list[str]:
    size = days_per_bucket(len(trend.dates))
    return HEADERS if size == 1 else [HEADERS[0], f"per {size} days", *HEADERS[2:]]


HEADERS = ["segment", "per day", "last day", "window [95% CI]", "corrected [95% CI]", "baseline", "change",
           "p (rise)", "n (window / baseline)", "judged / traffic (window)"]


def _corrected_cell(c: Corrected | None) -> str:
    if c is None or c.rate is None:
        return "–"
    return f"{_pct(c.rate)} [{_pct(c.ci_low)}–{_pct(c.ci_high)}]"


def corrected_note(trend: Trend, metric: str) -> str:
    """The line saying which rate is which, under a metric's table."""
    overall = next((s for s in trend.for_metric(metric) if not s.segment), None)
    c = overall.change.corrected if overall is not None and overall.change is not None else None
    said = "window: the judged rate, what the judge said; corrected: "
    if c is not None and c.rate is not None:
        return said + f"adjusted for the judge's error measured on {c.labels} labels (`judgeflow labels`)"
    return said + f"none overall ({c.reason if c is not None else NO_LABELS_READ})"


def _with_interval(c: Figures | None) -> str:
    if c is None or c.value is None:
        return "–"
    if c.ci_low is None:
        return _pct(c.value)
    return f"{_pct(c.value)} [{_pct(c.ci_low)}–{_pct(c.ci_high)}]"


def _traffic(c: Figures | None) -> str:
    """Judged results and the traffic they stand for (the sum of their weights) in the window."""
    if c is None or c.estimate is None:
        return "–"
    return f"{c.estimate.judged} / {round(c.estimate.traces)}"


@dataclass(frozen=True)
class _Plot:
    """Where a chart draws: its size, the plot area's margins, and the rate at its top."""

    width: int
    height: int
    days: int
    top: float
    left: int = 48
    right: int = 150
    top_pad: int = 24
    bottom: int = 30

    @property
    def plot_w(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> int:
        return self.height - self.top_pad - self.bottom

    def x(self, i: int) -> float:
        return self.left + (self.plot_w * i / max(1, self.days - 1))

    def y(self, rate: float) -> float:
        return self.top_pad + self.plot_h * (1 - rate / self.top)


def svg_chart(trend: Trend, metric: str, *, width: int = 640, height: int = 220) -> str:
    """A line chart of the metric's per-day rates, overall and per segment."""
    series = trend.for_metric(metric)
    plot = _Plot(width, height, len(trend.dates), _nice(_scale(series) or 0.01))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{plot.left}" y="15" font-size="13" font-weight="bold">{html.escape(metric)}: not-passed rate per day</text>',
    ]
    parts += _axes(plot, trend.dates)
    for i in trend.epoch_days(metric):
        parts.append(f'<line x1="{plot.x(i):.1f}" x2="{plot.x(i):.1f}" y1="{plot.top_pad}" y2="{plot.top_pad + plot.plot_h}" '
                     'stroke="#9ca3af" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{plot.x(i) + 3:.1f}" y="{plot.top_pad + 10}" fill="#6b7280">judge changed</text>')
    for n, s in enumerate(series):
        parts += _series_lines(plot, s, n)
    parts.append("</svg>")
    return "".join(parts)


def _axes(plot: _Plot, dates: list) -> list[str]:
    """Five grid lines with their rates, and about seven day labels (the last day's always)."""
    parts = []
    left, y = plot.left, plot.y
    for step in range(5):
        rate = plot.top * step / 4
        parts.append(f'<line x1="{left}" x2="{left + plot.plot_w}" y1="{y(rate):.1f}" y2="{y(rate):.1f}" stroke="#e5e7eb"/>')
        whole = abs(rate * 100 - round(rate * 100)) < 1e-9
        parts.append(f'<text x="{left - 4}" y="{y(rate) + 4:.1f}" text-anchor="end" fill="#6b7280">'
                     f'{rate:.0%}</text>' if whole else
                     f'<text x="{left - 4}" y="{y(rate) + 4:.1f}" text-anchor="end" fill="#6b7280">{rate:.1%}</text>')
    for i, d in enumerate(dates):
        if i % max(1, len(dates) // 7) == 0 or i == len(dates) - 1:
            parts.append(f'<text x="{plot.x(i):.1f}" y="{plot.height - 10}" text-anchor="middle" fill="#6b7280">'
                         f'{d.strftime("%m-%d")}</text>')
    return parts


def _series_lines(plot: _Plot, s, n: int) -> list[str]:
    """The ``n``-th series: its line (a gap for days without results, a dot for a lone day) and its legend."""
    colour = COLOURS[n % len(COLOURS)]
    segments, current = [], []
    for i, rate in enumerate(s.rates):
        if rate is None:
            if current:
                segments.append(current)
            current = []
        else:
            current.append(f"{plot.x(i):.1f},{plot.y(rate):.1f}")
    if current:
        segments.append(current)
    parts = []
    for points in segments:
        if len(points) == 1:
            cx, cy = points[0].split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
        else:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="{2.5 if n == 0 else 1.6}" '
                         f'points="{" ".join(points)}"/>')
    ly = plot.top_pad + 14 * n + 6
    change = _signed_pts(s.change.increase if s.change else None)
    parts.append(f'<rect x="{plot.width - plot.right + 10}" y="{ly - 8}" width="10" height="3" fill="{colour}"/>')
    parts.append(f'<text x="{plot.width - plot.right + 24}" y="{ly - 4}" fill="#111827">'
                 f'{html.escape(s.label[:18])} {html.escape(change)}</text>')
    return parts


def _nice(value: float) -> float:
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0):
        if value <= step:
            return step
    return 1.0


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def _md_cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def render_markdown(trend: Trend) -> str:
    lines = [
        "# judgeflow trend",
        "",
        f"Per-day not-passed rate by trace day (UTC), {trend.since} to {trend.until}. "
        f"Change: the last {trend.window} against the {trend.baseline} before it; "
        "p: one-sided Fisher's exact test of a rise. Rates are weighted by each result's sample weight "
        "(1 unless a sample budget sampled its night) with a 95% interval; judged / traffic: the results "
        "judged in the window and the traffic they stand for.",
    ]
    if any(unit_of(m) == "sessions" for m in trend.metrics):
        lines.append(f"\n{_SESSIONS_NOTE}")
    for metric in trend.metrics:
        lines += ["", f"## {_title(metric)}", "", f"![{metric} trend]({svg_data_uri(svg_chart(trend, metric))})", ""]
        lines.append("| " + " | ".join(headers(trend)) + " |")
        lines.append("|" + "---|" * len(HEADERS))
        for row in _rows(trend, metric):
            row[1] = f"`{row[1]}`"
            lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
        if trend.epoch_days(metric):
            lines.append("| judge changed | `" + epoch_marks(trend, metric) + "` |" + " |" * (len(HEADERS) - 2))
        marks = [corrected_note(trend, metric)] + epoch_lines(trend, metric)
        lines += [""] + [f"- {_md_cell(m)}" for m in marks]
    return "\n".join(lines)


def render_text(trend: Trend) -> str:
    import textwrap

    size = days_per_bucket(len(trend.dates))
    unit = "UTC days" if size == 1 else f"each character {size} UTC days"
    out = textwrap.wrap(
        f"Not-passed rate, {trend.since} to {trend.until} ({unit}, {NO_DATA} = no results); "
        f"change: last {trend.window} vs the {trend.baseline} before it; p: Fisher's exact test of a rise; "
        "rates are weighted by sample weights, with 95% intervals; judged / traffic: results judged in the "
        "window and the traffic they stand for", width=80, break_long_words=False, break_on_hyphens=False)
    if any(unit_of(m) == "sessions" for m in trend.metrics):
        out += textwrap.wrap(_SESSIONS_NOTE, width=80, break_long_words=False, break_on_hyphens=False)
    names = headers(trend)
    for metric in trend.metrics:
        rows = _rows(trend, metric)
        cells = [names] + rows
        widths = [max(len(r[i]) for r in cells) for i in range(len(names))]
        if trend.epoch_days(metric):
            widths[0] = max(widths[0], len("judge changed"))
        out += ["", f"{_title(metric)} (sparkline scale 0–{_pct(_scale(trend.for_metric(metric), size))})"]
        out.append("  ".join(h.ljust(w) for h, w in zip(names, widths)).rstrip())
        out.append("  ".join("-" * w for w in widths))
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        if trend.epoch_days(metric):
            out.append(("judge changed".ljust(widths[0]) + "  " + epoch_marks(trend, metric)).rstrip())
        out += textwrap.wrap(corrected_note(trend, metric), width=80, break_long_words=False)
        out += epoch_lines(trend, metric)
    return "\n".join(out)


_SESSIONS_NOTE = ("A metric per session counts sessions, not traces: each session once, by its latest score, on "
                  "the day of its last turn.")


def _title(metric: str) -> str:
    """A metric's heading: a session metric says its results count sessions (by each one's last turn's day)."""
    return f"{metric}, per session" if unit_of(metric) == "sessions" else metric


def _json_row(metric: str, segment: dict[str, str], e: Estimate | None, c: Corrected | None) -> dict:
    unit = unit_of(metric)  # "traces", or "sessions" for a session metric: what its traffic counts
    return {
        "metric": metric,
        "segment": dict(segment) or None,
        "unit": unit,
        unit: round(e.traces) if e else 0,
        "judged": e.judged if e else 0,
        "rate": e.rate if e else None,
        "ci_low": e.ci_low if e else None,
        "ci_high": e.ci_high if e else None,
        # the rate corrected for the judge's error (judgeflow/alerts/corrected.py); null with a note
        # saying why where the labels are not enough
        "corrected_rate": c.rate if c else None,
        "corrected_ci_low": c.ci_low if c else None,
        "corrected_ci_high": c.ci_high if c else None,
        "labels": c.labels if c and c.rate is not None else None,
        "corrected_note": (c.reason if c else NO_LABELS_READ) if c is None or c.rate is None else None,
    }


def trend_json(trend: Trend) -> dict:
    """`judgeflow report --json`: the alert window's rows (one per metric and
    segment, overall with ``segment`` null) and the same fields per day."""
    window = [_json_row(s.metric, s.segment, s.change.estimate if s.change else None,
                        s.change.corrected if s.change else None) for s in trend.series]
    days = [
        {"day": d.isoformat(), **_json_row(s.metric, s.segment, e, c)}
        for s in trend.series
        for d, e, c in zip(trend.dates, s.estimates, s.corrected_days(trend.dates))
    ]
    return {"since": trend.since.isoformat(), "until": trend.until.isoformat(), "alert_window": trend.window,
            "window": window, "days": days}
