"""Planning one night's sample on the database: count the new traces per
stratum, price them, allocate what is left of the night's budget, select and
record. Called by the task ``plan-night-sample`` (judgeflow/tasks/sampling.py)
and by `judgeflow score --plan` (which records nothing).

The night's budget holds across all its runs: what is left for a run is the
budget less what earlier runs of the night billed (``judgeflow.sample_ledger``;
a run killed before it entered its figure counts at what its results and the
claims it still holds recorded, judgeflow/sampling/decisions.py) and less the
estimated cost of selected traces still waiting. New strata share what is
left; a stratum planned earlier in the night keeps its inclusion probability
for the traces that arrived since (judgeflow/sampling/selection.py). Under a
larger budget than the night's earlier runs had, what the new strata leave
raises the strata planned earlier (:func:`_raise`): more of their traces are
selected, the earlier picks kept.
Prices are tonight's (judgeflow/sampling/prices.py): each trace is priced
from its own text, corrected per judge model by what the judge billed for the
newest results; a stratum planned earlier tonight, raised, is priced at its
recorded cost per trace times what its traces judged tonight billed over it.
The plan keeps headroom for the traces' costs varying about their mean
(judgeflow/sampling/allocation.py, ``HEADROOM_Z``), and what a run leaves of
the budget once its selection is judged is planned again at tonight's prices
(:func:`plan_night` with ``top_up``): more of the strata's traces are selected,
the earlier picks kept, until the budget is spent."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Engine, text

from judgeflow.db.pairs import key_pages
from judgeflow.sources.trace_source import KeyFilter, TraceSource, read_bodies
from judgeflow.judge.pricing import Prices
from judgeflow.metrics.cost import estimate_pair_cost
from judgeflow.metrics.registry import metric_names
from judgeflow.sampling import decisions
from judgeflow.sampling.allocation import Allocation, Detect, SamplePlan, StratumInput, allocate, upper_cost
from judgeflow.sampling.power import POWER, SIZED_RISE, min_detectable_rise, segment_alpha
from judgeflow.sampling.selection import select, select_below
from judgeflow.sampling.prices import PriceCorrection, recent_correction
from judgeflow.sampling.strata import Traffic, recent_fail_rates, stratify, undecided_new_keys, unknown_keys
from judgeflow.config.judge_models import judge_models
from judgeflow.config.settings import Settings
from judgeflow.errors import ConfigError

PAGE = 5000
# a stratum with no recent results: its rise is claimed from this failing rate
DEFAULT_RATE = 0.05
# recent results that correct the token estimate: this far back
COST_HISTORY = timedelta(days=7)
# the plan's total cost fits the budget at this upper normal quantile (95%): every planned count is
# judged on about 95% of nights whose traces cost what they were priced at on average
HEADROOM_Z = 1.645
# a top-up is planned only while the run has at least this share of the budget left to spend
TOP_UP_MIN_SHARE = 0.01
# top-ups a run makes at most (each spends what the last left at its quantile: about 95% of it)
TOP_UP_PASSES = 3


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


@dataclass(frozen=True)
class Claim:
    """How the plan's table computes a stratum's smallest rise seen with 80%
    power, and the rise the power step sizes strata for."""

    alpha: float  # the level a segment's Holm-adjusted test meets, at worst
    ratio: float  # the baseline's length over the window's
    min_increase: float | None  # the smallest minimum rise of the regression rules (None: no rule)
    min_samples: int
    sized_rise: float | None  # SIZED_RISE x min_increase (None: no regression rule)

    def rise(self, judged: int, rate: float) -> float | None:
        """The smallest true rise from ``rate`` a window of ``judged`` (against a
        baseline judged as it is, ``ratio`` times longer) sees with 80% power."""
        return min_detectable_rise(judged, int(judged * self.ratio), rate, alpha=self.alpha,
                                   min_increase=self.min_increase, min_samples=self.min_samples)


@dataclass
class NightPlan:
    night: date
    budget_usd: float | None
    committed_before_usd: float  # the night's earlier runs: billed, and selected traces still waiting
    full_cost_usd: float
    sampled: bool
    rows: list[StratumRow] = field(default_factory=list)
    recorded: int = 0
    spent_before_usd: float = 0.0  # what the night's earlier runs billed (the ledger)
    raised_from_usd: float | None = None  # a larger budget than the night was planned under: the earlier one
    # the oldest trace a raise selected: the run reads from there (it may be older than the watermark)
    reads_from: datetime | None = None
    claim: Claim | None = None
    rates: dict[str, float] = field(default_factory=dict)  # each stratum's failing rate over the baseline period
    restated: list[str] = field(default_factory=list)  # after the run: strata judged fewer than planned
    headroom_usd: float = 0.0  # what the plan holds back for the traces' costs varying about their mean
    reserve_usd: float = 0.0  # what this run leaves for the traces that arrive after the night's plan
    reserve_share: float = 0.0  # the late reserve's share of the budget
    prices: PriceCorrection | None = None  # how tonight's token estimates were corrected
    topped_up: list[str] = field(default_factory=list)  # the run's top-ups, in words

    def absorb(self, later: "NightPlan") -> None:
        """A top-up of the same run: its raised strata replace their rows (their
        estimated cost adds the new picks'), its notes join these."""
        # a raised stratum's row is its whole sample phase; a row of late traces alone does not replace one
        rows = {r.stratum: r for r in later.rows}
        self.rows = [replace(rows[r.stratum], est_cost_usd=r.est_cost_usd + rows[r.stratum].est_cost_usd)
                     if rows.get(r.stratum) and rows[r.stratum].traffic >= r.traffic else r for r in self.rows]
        self.rows += [r for r in later.rows if r.stratum not in {x.stratum for x in self.rows}]
        self.topped_up += later.topped_up
        if later.reads_from is not None:
            self.reads_from = min(later.reads_from, self.reads_from or later.reads_from)

    @property
    def run_limit_usd(self) -> float | None:
        """What this run may bill: the night's budget less what its earlier runs
        billed and less what the late reserve still holds for traces yet to arrive."""
        return None if self.budget_usd is None else max(self.budget_usd - self.spent_before_usd - self.reserve_usd,
                                                         0.0)

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
            c = self.claim
            if c is not None and c.sized_rise is not None and c.min_increase is not None:
                out.append(f"the regression rule pages on an observed rise of at least {c.min_increase * 100:.1f} "
                           f"pts; strata are sized to see a true rise of {c.sized_rise * 100:.1f} pts "
                           f"({c.sized_rise / c.min_increase:g} times that) with {POWER:.0%} power where the budget "
                           "reaches; each row gives the smallest rise its own sample sees with that power")
        if self.headroom_usd > 0:
            out.append(f"the plan holds ${self.headroom_usd:.4f} of the budget back for the traces' costs varying "
                       f"about their estimates (its planned counts fit at the 95% quantile of their total); "
                       "what the run leaves is spent on more traces at tonight's prices")
        if self.reserve_usd > 0:
            out.append(f"${self.reserve_usd:.4f} ({self.reserve_share:.1%} of the budget, less what late traces got "
                       "tonight) is held for traces that arrive after the night's plan: a later run judges them at "
                       "their stratum's probability (JUDGEFLOW_SAMPLE_LATE_RESERVE)")
        if self.prices is not None and self.prices.ratios:
            out.append("tonight's token estimates are corrected by what the judge billed for the newest results: "
                       + ", ".join(f"{m} x{r:.2f}" for m, r in sorted(self.prices.ratios.items())))
        if self.raised_from_usd is not None:
            out.append(f"the night was planned under ${self.raised_from_usd:.4f}; with ${self.budget_usd:.4f} the "
                       "strata planned then judge more of their traces (those selected before stay selected)")
        for r in self.rows:
            if r.short_reason:
                out.append(f"stratum {r.stratum}: {r.judged} of {r.traffic} judged, fewer than the minimum: "
                           f"{r.short_reason}")
            elif r.power_short:
                out.append(f"stratum {r.stratum}: {r.judged} of {r.traffic} judged: {r.power_short}")
        return out + self.topped_up + self.restated


def _min_increase(settings: Settings) -> float | None:
    found = [settings.metric(name).regression_min_increase for name in metric_names()]
    found = [v for v in found if v is not None]
    return min(found) if found else None


def family_size(settings: Settings, strata: list[str], keys: tuple[str, ...] | None = None) -> int:
    """How many tests a regression rule's evaluation makes over these strata:
    overall, and per segment key of the rule (``keys``, default the alert
    segment keys) each value the strata hold (at most the top
    ``JUDGEFLOW_ALERT_SEGMENT_TOP`` and ``other``; a key the strata do not
    split by counts as many)."""
    tests = 1
    for key in settings.alert_segment_keys if keys is None else keys:
        values = {part.split("=", 1)[1] for name in strata for part in name.split(",")
                  if part.startswith(f"{key}=")}
        tests += min(len(values), settings.alert_segment_top + 1) if values else settings.alert_segment_top + 1
    return tests


def detect_for(settings: Settings, strata: list[str]) -> Detect | None:
    """What the strata are sized for: the smallest minimum rise of the enabled
    regression rules at the alpha of a segment's Holm-adjusted test in the largest family of
    those rules (each segmented by its metric's keys) (None: no regression rule)."""
    rise = _min_increase(settings)
    if rise is None:
        return None
    tests = max(family_size(settings, strata, settings.metric_segment_keys(name)) for name in metric_names()
                if settings.metric(name).regression_min_increase is not None)
    return Detect(rise, settings.regression_alpha, tests,
                  settings.regression_baseline_s / settings.alert_window_s)


def _estimator(settings: Settings, prices: Prices):
    """``estimate(metric, body)``: the token estimate of judging ``body`` for ``metric``, in USD."""
    def estimate(metric: str, body) -> float:
        return estimate_pair_cost(prices, metric, input=body.input, output=body.output, context=body.context,
                                  max_field_chars=settings.max_field_chars)
    return estimate


def price_correction(settings: Settings, source: TraceSource, source_engine: Engine, engine: Engine,
                     metrics: list[str], prices: Prices, now: datetime) -> PriceCorrection:
    """Per judge model, what the judge billed for the newest results over their token estimate."""
    models = judge_models(settings, metrics)
    with engine.connect() as conn:
        return recent_correction(conn, source, source_engine, metrics, since=now - COST_HISTORY,
                                 model_of=models.__getitem__, estimate=_estimator(settings, prices))


def count_traffic(settings: Settings, source: TraceSource, source_engine: Engine, engine: Engine,
                  key_filter: KeyFilter, metrics: list[str], prices: Prices,
                  correction: PriceCorrection | None = None) -> Traffic:
    """The new, undecided traces of the read window, by stratum, each priced per
    metric from its own text, times its judge model's ``correction``."""
    estimate, models = _estimator(settings, prices), judge_models(settings, metrics)
    correction = correction or PriceCorrection()

    def cost_of(body) -> dict[str, float]:
        raw = {m: estimate(m, body) for m in metrics}
        return {m: e * correction.ratio(models[m], e) for m, e in raw.items()}

    traffic = Traffic()
    for keys in key_pages(source, source_engine, key_filter, page=PAGE):
        with engine.connect() as conn:
            new = undecided_new_keys(conn, keys, metrics)
        if new:
            traffic.merge(stratify(read_bodies(source, source_engine, new).bodies, new, settings.stratify_keys,
                                   cost_of))
    return traffic


@dataclass
class _Night:
    """What the database says of the night before it is planned."""

    now: datetime
    night: date
    spent: float  # billed by the night's earlier runs
    promised: float  # the estimated cost of its selected traces still waiting
    probs: dict[str, float]  # strata planned earlier tonight
    tonight: dict[str | None, float]  # per stratum planned tonight (None: the night's): billed over planned cost
    rates: dict[str, float]
    pools: dict[str, tuple[int, int, float]]  # strata planned earlier: (sample population, selected, cost per trace)
    planned_budget: float | None  # the largest budget an earlier run of the night planned under
    late_history: float | None  # the share of traces decided late over the last nights
    late_paid: float  # what the night's late traces decided so far are estimated to cost


def _read_night(settings: Settings, engine: Engine, metrics: list[str], record: bool, *,
                budget_usd: float | None, flow_run_id: str | None) -> _Night:
    keys = settings.stratify_keys
    with engine.begin() as conn:
        now: datetime = conn.execute(text("SELECT now()")).scalar_one()
        if record:
            decisions.reweigh(conn)
        night = now.astimezone(timezone.utc).date()  # the night is the UTC day the run plans on
        planned_budget = decisions.night_budget_usd(conn, night)
        spent = decisions.night_spent_usd(conn, night, recover=record)
        if record and budget_usd is not None and flow_run_id is not None:
            decisions.open_run(conn, night, flow_run_id, budget_usd)
        return _Night(
            now, night, spent, decisions.pending_selected_usd(conn, night),
            decisions.stratum_probs(conn, night), decisions.tonight_price_ratios(conn, night, len(metrics)),
            recent_fail_rates(conn, metrics, keys, since=now - timedelta(seconds=settings.regression_baseline_s)),
            decisions.sample_pools(conn, night), planned_budget, decisions.late_share(conn, night),
            decisions.late_committed_usd(conn, night),
        )


def _refuse_unknown_keys(settings: Settings, traffic: Traffic) -> None:
    """A key set in JUDGEFLOW_STRATIFY_BY that no new trace carries is a mistake
    to name, not one 'other' stratum (unset, the alert segment keys are taken as they come)."""
    if not settings.stratify_by:
        return
    unknown = unknown_keys(traffic, settings.stratify_keys)
    if unknown:
        raise ConfigError(
            f"JUDGEFLOW_STRATIFY_BY names unknown metadata key(s) {', '.join(map(repr, unknown))}: none of the "
            f"night's {traffic.total} new traces has them, so they would make one 'other' stratum"
            + (f" (keys seen: {', '.join(sorted(traffic.seen_keys))})" if traffic.seen_keys else ""))


def _late(traffic: Traffic, n: _Night, costs: dict[str, float], min_samples: int) -> list[Allocation]:
    """The strata planned earlier tonight: their new traces at the stratum's probability."""
    out = []
    for s in sorted(set(traffic.keys) & set(n.probs)):
        judged = len(select_below([k.id for k in traffic.keys[s]], n.probs[s], n.night))
        total = len(traffic.keys[s])
        out.append(Allocation(s, total, judged, judged * costs[s], min(total, min_samples)))
    return out


def _raise(n: _Night, late: list[Allocation], money: float, budget_usd: float | None, *, top_up: bool,
           spread: float) -> list[Allocation]:
    """A budget larger than the one the night was planned under, or (``top_up``)
    what a run left once its selection was judged: ``money`` raises the strata
    planned earlier tonight, as a cost-aware Neyman split of their traces not
    selected yet (late ones included), with headroom, each priced at its
    recorded cost per trace times what its traces billed tonight over it
    (tonight's prices); each row is the stratum's whole sample phase after the
    raise, its cost this run's new picks."""
    larger = budget_usd is not None and n.planned_budget is not None and budget_usd > n.planned_budget
    if not (larger or top_up) or budget_usd is None or money <= TOP_UP_MIN_SHARE * budget_usd:
        return []
    late_of = {a.name: a for a in late}
    pools = {s: (pop + (late_of[s].traffic if s in late_of else 0), sel + (late_of[s].judged if s in late_of else 0),
                 cost * n.tonight.get(s, n.tonight.get(None, 1.0))) for s, (pop, sel, cost) in n.pools.items()}
    inputs = [StratumInput(s, pop - sel, cost, n.rates.get(s), cost_sd=spread * cost)
              for s, (pop, sel, cost) in sorted(pools.items()) if pop > sel and cost > 0]
    extra = allocate(inputs, budget_usd=money, min_samples=0, headroom_z=HEADROOM_Z).strata
    return [Allocation(a.name, pools[a.name][0], pools[a.name][1] + a.judged,
                       a.cost_usd + (late_of[a.name].cost_usd if a.name in late_of else 0.0), 0)
            for a in extra if a.judged > 0]


def plan_night(settings: Settings, source: TraceSource, source_engine: Engine, engine: Engine,
               key_filter: KeyFilter, metrics: list[str], prices: Prices, *, budget_usd: float | None,
               record: bool, flow_run_id: str | None = None, top_up: bool = False) -> NightPlan:
    """Plan (and with ``record``, select and record) the night's sample;
    ``top_up``: a run whose selection is judged spends what it left on more
    of the strata planned tonight."""
    n = _read_night(settings, engine, metrics, record, budget_usd=budget_usd, flow_run_id=flow_run_id)
    correction = price_correction(settings, source, source_engine, engine, metrics, prices, n.now)
    traffic = count_traffic(settings, source, source_engine, engine, key_filter, metrics, prices, correction)
    _refuse_unknown_keys(settings, traffic)
    costs = {s: traffic.cost_per_trace(s, metrics) for s in traffic.keys}
    late = _late(traffic, n, costs, settings.alert_min_samples) if budget_usd is not None else []
    committed = n.spent + n.promised
    late_cost = sum(a.cost_usd for a in late)
    share = settings.sample_late_reserve if settings.sample_late_reserve is not None else (n.late_history or 0.0)
    # the late reserve, less what late traces got tonight: only they spend it
    reserve = 0.0 if budget_usd is None else max(share * budget_usd - n.late_paid - late_cost, 0.0)
    left = None if budget_usd is None else max(budget_usd - committed - late_cost - reserve, 0.0)
    inputs = sorted((StratumInput(s, len(ks), costs[s], n.rates.get(s),
                                  cost_sd=traffic.cost_sd(s, metrics, correction.spread))
                     for s, ks in traffic.keys.items() if s not in {a.name for a in late}), key=lambda i: i.name)
    plan = allocate(inputs, budget_usd=left, min_samples=settings.alert_min_samples,
                    detect=detect_for(settings, list(traffic.keys)), headroom_z=HEADROOM_Z)
    # what the new strata may cost at the plan's quantile is theirs: the rest may raise the strata planned earlier
    held = upper_cost(inputs, [a.judged for a in plan.strata], HEADROOM_Z) if inputs else 0.0
    raised = _raise(n, late, (left or 0.0) - held, budget_usd, top_up=top_up, spread=correction.spread)
    shown = {a.name: a for a in late} | {a.name: a for a in raised}
    # a raised stratum's traffic is its whole sample phase: the traces planned earlier tonight count in the full cost
    earlier = sum((a.traffic - len(traffic.keys.get(a.name, []))) * n.pools[a.name][2] for a in raised)
    plan = SamplePlan(plan.budget_usd, plan.full_cost_usd + sum(a.traffic * costs[a.name] for a in late) + earlier,
                      sorted(plan.strata + list(shown.values()), key=lambda a: a.name),
                      plan.sampled or bool(late) or bool(raised), plan.headroom_usd)
    night_plan = _rows(settings, n.night, budget_usd, committed, plan, n.rates)
    night_plan.spent_before_usd, night_plan.headroom_usd, night_plan.prices = n.spent, plan.headroom_usd, correction
    night_plan.reserve_usd, night_plan.reserve_share = reserve, share
    if raised and not top_up:
        night_plan.raised_from_usd = n.planned_budget
    if raised and top_up:
        more = sum(a.judged - n.pools[a.name][1] for a in raised if a.name in n.pools)
        night_plan.topped_up.append(
            f"the run's selection was judged with ${left or 0.0:.4f} of the budget left: {more} more traces of "
            f"{len(raised)} strata were selected at tonight's prices (what their judged traces billed over their "
            "estimates), the earlier picks kept")
    if record and plan.sampled:
        night_plan.recorded, night_plan.reads_from = _record(engine, n, traffic, plan, late, costs, flow_run_id,
                                                             raised)
    return night_plan


def _record(engine: Engine, n: _Night, traffic: Traffic, plan: SamplePlan, late: list[Allocation],
            costs: dict[str, float], flow_run_id: str | None, raised: list[Allocation]
            ) -> tuple[int, datetime | None]:
    """Select and record the plan's traces; a new stratum's probability is
    recorded for the rest of the night; a raised stratum selects more of its
    traces not selected yet (the earlier picks stay). Returns the decisions
    written and when the oldest trace a raise selected was created."""
    recorded, late_names, oldest = 0, {a.name for a in late}, []
    with engine.begin() as conn:
        for name in sorted(traffic.keys):
            keys = traffic.keys[name]
            ids = [k.id for k in keys]
            if name in late_names or name in n.probs:
                prob = n.probs[name]
                chosen = select_below(ids, prob, n.night)
            else:
                a = next(a for a in plan.strata if a.name == name)
                prob = a.inclusion_prob
                chosen = select(ids, a.judged, n.night)
                decisions.record_stratum(conn, n.night, name, prob, costs[name])
            recorded += decisions.record(conn, n.night, name, keys, chosen, inclusion_prob=max(prob, 1e-9),
                                         cost_per_trace=costs[name], flow_run_id=flow_run_id)
        for a in raised:
            oldest.append(decisions.extend(conn, n.night, a.name, a.judged - n.pools[a.name][1]
                                           - sum(x.judged for x in late if x.name == a.name)))
    return recorded, min((t for t in oldest if t is not None), default=None)


def _rows(settings: Settings, night: date, budget_usd: float | None, committed: float, plan: SamplePlan,
          rates: dict[str, float]) -> NightPlan:
    rise = _min_increase(settings)
    # a segment's test meets the rule's alpha Holm-adjusted over the family: at worst alpha / tests
    claim = Claim(segment_alpha(settings.regression_alpha, family_size(settings, [a.name for a in plan.strata])),
                  settings.regression_baseline_s / settings.alert_window_s, rise, settings.alert_min_samples,
                  None if rise is None else SIZED_RISE * rise)
    rows = [StratumRow(a.name, a.traffic, a.judged, a.cost_usd, a.inclusion_prob,
                       claim.rise(a.judged, rates.get(a.name, DEFAULT_RATE)), a.short_reason, a.power_short)
            for a in plan.strata]
    return NightPlan(night, budget_usd, committed, plan.full_cost_usd, plan.sampled, rows, claim=claim,
                     rates=dict(rates))


def restate(plan: NightPlan, judged: dict[str, int]) -> list[str]:
    """After the run: a stratum judged fewer than planned (the budget ran out
    first because traces cost more than estimated, or time, or a stop) sees a larger rise than the
    plan said; its row is restated for what was judged, and a note says so."""
    if plan.claim is None:
        return []
    notes = []
    for i, r in enumerate(plan.rows):
        got = judged.get(r.stratum, 0)
        if got >= r.judged:
            continue
        now = plan.claim.rise(got, plan.rates.get(r.stratum, DEFAULT_RATE))
        plan.rows[i] = replace(r, min_detectable_rise=now)
        notes.append(f"stratum {r.stratum}: {got} of the {r.judged} planned were judged by the end of the run (the "
                     "budget, time or a stop ran out first); the smallest rise it sees with 80% power is now "
                     + ("n/a (too few to decide)" if now is None else f"+{now * 100:.1f} pts"))
    return notes


def judged_per_stratum(engine: Engine, night: date) -> dict[str, int]:
    """The night's traces with a scored result, per stratum of its sample phase."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                """
                SELECT d.stratum, count(*) FROM judgeflow.sample_decisions d
                WHERE d.night = :n AND d.phase = 'sample' AND d.selected
                  AND EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id AND r.status = 'scored')
                GROUP BY 1
                """
            ),
            {"n": night},
        ).all()
    return {s: int(c) for s, c in rows}


def spent_per_stratum(engine: Engine, night: date, flow_run_ids: list[str]) -> dict[str, float]:
    """What runs (one, or a sharded night's children) actually spent per stratum of the night's decisions."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                """
                SELECT d.stratum, coalesce(sum(r.cost_usd), 0) FROM judgeflow.sample_decisions d
                JOIN judgeflow.eval_results r ON r.trace_id = d.trace_id
                WHERE d.night = :n AND r.flow_run_id = ANY(:runs) GROUP BY 1
                """
            ),
            {"n": night, "runs": list(flow_run_ids)},
        ).all()
    return {s: float(v) for s, v in rows}
