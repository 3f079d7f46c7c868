"""Planning one night's sample on the database: count the new traces per
stratum, price them, allocate the budget, select and record. Called by the
task ``plan-night-sample`` (judgeflow/tasks/sampling.py) and by `judgeflow
score --plan` (which records nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Engine, text

from judgeflow.db.pairs import key_pages
from judgeflow.sources.trace_source import KeyFilter, TraceSource, read_bodies
from judgeflow.judge.pricing import Prices, estimate_pair_cost
from judgeflow.metrics.registry import metric_names
from judgeflow.sampling import decisions
from judgeflow.sampling.allocation import Detect, SamplePlan, StratumInput, allocate
from judgeflow.sampling.power import min_detectable_rise, segment_alpha
from judgeflow.sampling.selection import select
from judgeflow.sampling.strata import Traffic, recent_cost_per_trace, recent_fail_rates, stratify, undecided_new_keys
from judgeflow.config.settings import Settings

PAGE = 5000
# recent results that price a trace: this far back
COST_HISTORY = timedelta(days=7)


@dataclass(frozen=True)
class StratumRow:
    """One line of the plan's table."""

    stratum: str
    traffic: int
    judged: int
    est_cost_usd: float
    inclusion_prob: float
    min_detectable_rise: float | None
    short_reason: str | None = None
    power_short: str | None = None  # why fewer than the regression rule needs to see its minimum rise
    spent_usd: float | None = None  # filled in after the run


@dataclass
class NightPlan:
    night: date
    budget_usd: float | None
    committed_before_usd: float  # the night's earlier runs' selected traces
    full_cost_usd: float
    sampled: bool
    rows: list[StratumRow] = field(default_factory=list)
    recorded: int = 0

    @property
    def not_sampled(self) -> int:
        return sum(r.traffic - r.judged for r in self.rows)

    def notes(self) -> list[str]:
        out = []
        if self.sampled:
            judged, traffic = sum(r.judged for r in self.rows), sum(r.traffic for r in self.rows)
            cost = sum(r.est_cost_usd for r in self.rows)
            out.append(f"sample budget ${self.budget_usd:.4f}: judging {judged} of {traffic} new traces (est. "
                       f"${cost:.4f} of ${self.full_cost_usd:.4f} for all); {self.not_sampled} recorded as not sampled")
        for r in self.rows:
            if r.short_reason:
                out.append(f"stratum {r.stratum}: {r.judged} of {r.traffic} judged, fewer than the minimum: "
                           f"{r.short_reason}")
            elif r.power_short:
                out.append(f"stratum {r.stratum}: {r.judged} of {r.traffic} judged: {r.power_short}")
        return out


def _min_increase(settings: Settings) -> float | None:
    found = [settings.metric(name).regression_min_increase for name in metric_names()]
    found = [v for v in found if v is not None]
    return min(found) if found else None


def family_size(settings: Settings, strata: list[str]) -> int:
    """How many tests a regression rule's evaluation makes over these strata:
    overall, and per alert segment key each value the strata hold (at most the
    top ``JUDGEFLOW_ALERT_SEGMENT_TOP`` and ``other``; a key the strata do not
    split by counts as many)."""
    tests = 1
    for key in settings.alert_segment_keys:
        values = {part.split("=", 1)[1] for name in strata for part in name.split(",")
                  if part.startswith(f"{key}=")}
        tests += min(len(values), settings.alert_segment_top + 1) if values else settings.alert_segment_top + 1
    return tests


def detect_for(settings: Settings, strata: list[str]) -> Detect | None:
    """What the strata are sized for: the smallest minimum rise of the enabled
    regression rules at the alpha of a segment's Holm-adjusted test (None: no regression rule)."""
    rise = _min_increase(settings)
    if rise is None:
        return None
    return Detect(rise, settings.regression_alpha, family_size(settings, strata),
                  settings.regression_baseline_s / settings.alert_window_s)


def count_traffic(settings: Settings, source: TraceSource, source_engine: Engine, engine: Engine,
                  key_filter: KeyFilter, metrics: list[str], costs: dict[str, float], prices: Prices) -> Traffic:
    """The new, undecided traces of the read window, by stratum, priced per trace."""
    def cost_of(body) -> float:
        return sum(costs[m] if m in costs else estimate_pair_cost(
            prices, m, input=body.input, output=body.output, context=body.context,
            max_field_chars=settings.max_field_chars) for m in metrics)

    traffic = Traffic()
    for keys in key_pages(source, source_engine, key_filter, page=PAGE):
        with engine.connect() as conn:
            new = undecided_new_keys(conn, keys, metrics)
        if not new:
            continue
        bodies = read_bodies(source, source_engine, new).bodies
        part = stratify(bodies, new, settings.stratify_keys, cost_of)
        for stratum, ks in part.keys.items():
            traffic.keys.setdefault(stratum, []).extend(ks)
            traffic.token_cost[stratum] = traffic.token_cost.get(stratum, 0.0) + part.token_cost[stratum]
    return traffic


def plan_night(settings: Settings, source: TraceSource, source_engine: Engine, engine: Engine,
               key_filter: KeyFilter, metrics: list[str], prices: Prices, *, budget_usd: float | None,
               record: bool, flow_run_id: str | None = None) -> NightPlan:
    """Plan (and with ``record``, select and record) the night's sample."""
    with engine.begin() as conn:
        now: datetime = conn.execute(text("SELECT now()")).scalar_one()
        if record:
            decisions.reweigh(conn)
        night = now.astimezone(timezone.utc).date()  # the night is the UTC day the run plans on
        committed = decisions.committed_usd(conn, night)
        costs = recent_cost_per_trace(conn, metrics, since=now - COST_HISTORY)
        rates = recent_fail_rates(conn, metrics, settings.stratify_keys,
                                  since=now - timedelta(seconds=settings.regression_baseline_s))
    traffic = count_traffic(settings, source, source_engine, engine, key_filter, metrics, costs, prices)
    left = None if budget_usd is None else max(budget_usd - committed, 0.0)
    inputs = [StratumInput(s, len(ks), traffic.token_cost[s] / len(ks), rates.get(s))
              for s, ks in traffic.keys.items()]
    detect = detect_for(settings, list(traffic.keys))
    plan = allocate(inputs, budget_usd=left, min_samples=settings.alert_min_samples, detect=detect)
    night_plan = _rows(settings, night, budget_usd, committed, plan, rates)
    if record and plan.sampled:
        with engine.begin() as conn:
            for a in plan.strata:
                keys = traffic.keys[a.name]
                chosen = select([k.id for k in keys], a.judged, night)
                night_plan.recorded += decisions.record(
                    conn, night, a.name, keys, chosen, inclusion_prob=max(a.inclusion_prob, 1e-9),
                    cost_per_trace=a.cost_usd / a.judged if a.judged else 0.0, flow_run_id=flow_run_id,
                )
    return night_plan


def _rows(settings: Settings, night: date, budget_usd: float | None, committed: float, plan: SamplePlan,
          rates: dict[str, float]) -> NightPlan:
    ratio = settings.regression_baseline_s / settings.alert_window_s
    # a segment's test meets the rule's alpha Holm-adjusted over the family: at worst alpha / tests
    alpha = segment_alpha(settings.regression_alpha, family_size(settings, [a.name for a in plan.strata]))
    rows = [
        StratumRow(
            a.name, a.traffic, a.judged, a.cost_usd, a.inclusion_prob,
            min_detectable_rise(a.judged, int(a.judged * ratio), rates.get(a.name, 0.05),
                                alpha=alpha, min_increase=_min_increase(settings),
                                min_samples=settings.alert_min_samples),
            a.short_reason, a.power_short,
        )
        for a in plan.strata
    ]
    return NightPlan(night, budget_usd, committed, plan.full_cost_usd, plan.sampled, rows)


def spent_per_stratum(engine: Engine, night: date, flow_run_id: str) -> dict[str, float]:
    """What a run actually spent per stratum of the night's decisions."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                """
                SELECT d.stratum, coalesce(sum(r.cost_usd), 0) FROM judgeflow.sample_decisions d
                JOIN judgeflow.eval_results r ON r.trace_id = d.trace_id
                WHERE d.night = :n AND r.flow_run_id = :run GROUP BY 1
                """
            ),
            {"n": night, "run": flow_run_id},
        ).all()
    return {s: float(v) for s, v in rows}
