"""Does the sample budget spend where it detects? A month of simulated nightly
traffic, judged three ways at 10% of the full cost or in full:

- ``all``: every trace judged (no budget);
- ``flat``: a flat 10% sample (``--sample-rate 0.1``: a hash of the id below 0.1);
- ``budget``: ``JUDGEFLOW_SAMPLE_BUDGET_USD`` at 10% of the full cost: judgeflow's
  own planner (judgeflow.sampling.allocation.allocate, with each stratum's
  failing rate estimated from the last 7 nights' judged results and its power
  step sized for the rule below, and judgeflow.sampling.selection.select).

Each night the toxicity regression rule is evaluated overall and per app with
judgeflow's own code: the weighted counts of the window (the night) and the
baseline (the 7 nights before) become figures through
judgeflow.alerts.evaluation.figures_from_counts, their p-values are
Holm-adjusted over the evaluation's tests by
judgeflow.alerts.lifecycle.correct_for_family, and
judgeflow.alerts.lifecycle.decide runs the rule's state machine. ``--ablate
holm`` or ``--ablate power`` leaves one of those two out, to measure what each does.

Two months: a control month with no change (false alerts), and a month whose
2%-traffic app regresses on day 20 (nights until the alert fires).

    .venv/bin/python -m bench.sampling [--seeds 5] [--traffic 6000] [--alpha A] [--regressed-rate R]

What it simplifies: traces are independent Bernoulli draws at a fixed rate per
app (no daily cycle, no correlated bursts, no drift outside the regression);
every trace costs the same to judge (the real planner prices strata by their
text length and by recent results' costs); one metric; the judge is always
right and never fails; a night's traffic all arrives before the run, which
judges everything it planned (no run budget, no time budget, no retries).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import platform
import random
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from judgeflow.alerts.estimates import WeightedCounts, estimate
from judgeflow.alerts.evaluation import OVERALL, Segment, figures_from_counts
from judgeflow.alerts.lifecycle import correct_for_family, decide
from judgeflow.alerts.rules import all_rules
from judgeflow.alerts.stats import fisher_greater
from judgeflow.sampling.allocation import Detect, StratumInput, allocate
from judgeflow.sampling.planner import HEADROOM_Z
from judgeflow.sampling.selection import select
from judgeflow.config.settings import Settings

# apps by share of traffic and failing rate; "pay" is the 2% app that regresses
APPS = {"chat": (0.55, 0.010), "search": (0.20, 0.020), "support": (0.10, 0.030), "docs": (0.08, 0.015),
        "mail": (0.05, 0.040), "pay": (0.02, 0.020)}
TARGET = "pay"
REGRESSED_RATE = 0.12
REGRESSION_DAY = 20
DAYS = 30
COST = 0.01  # USD per trace (both metrics)
SHARE = 0.10  # the budget: this share of the full cost
BASELINE_NIGHTS = 7


MIN_INCREASE = 0.05  # the regression rule pages on a rise of 5 points or more
DETECTION_TRAFFIC = 6000  # traces a night in the detection nights
ALPHA = 0.01  # JUDGEFLOW_REGRESSION_ALPHA (--alpha)


def settings(alpha: float = ALPHA) -> Settings:
    return Settings(_env_file=None, database_url="postgresql://unused/bench",
                    toxicity_regression_min_increase=MIN_INCREASE,
                    alert_segment_by="app", alert_window="24h", regression_baseline="7d", alert_min_samples=50,
                    regression_alpha=alpha)


def _flat(trace_id: str) -> bool:
    return int(hashlib.md5(trace_id.encode()).hexdigest()[:8], 16) / 2**32 < SHARE


@dataclass
class Night:
    counts: dict[str, WeightedCounts]  # per app
    spend: float


def _add(a: WeightedCounts, b: WeightedCounts) -> WeightedCounts:
    return WeightedCounts(a.n + b.n, a.bad + b.bad, a.sum_w + b.sum_w, a.sum_w_bad + b.sum_w_bad, a.sum_w2 + b.sum_w2)


def _judge(rows: list[tuple[str, bool]], chosen: set[str], weight: float) -> WeightedCounts:
    c = WeightedCounts()
    for trace_id, bad in rows:
        if trace_id in chosen:
            c = _add(c, WeightedCounts(1, int(bad), weight, weight * bad, weight * weight))
    return c


Traffic = dict[str, list[tuple[str, bool]]]  # app -> (trace id, fails) per trace


def _traffic(rng: random.Random, day: int, total: int, regressed_rate: float | None) -> Traffic:
    out = {}
    for app, (share, rate) in APPS.items():
        if regressed_rate is not None and app == TARGET and day >= REGRESSION_DAY:
            rate = regressed_rate
        n = round(total * share)
        out[app] = [(f"{day}-{app}-{i}-{rng.random():.6f}", rng.random() < rate) for i in range(n)]
    return out


def _night(strategy: str, traffic, history: list[Night], day: int, budget: float, alpha: float,
           ablate: str = "") -> Night:
    if strategy == "all":
        return Night({a: _judge(rows, {t for t, _ in rows}, 1.0) for a, rows in traffic.items()},
                     COST * sum(len(r) for r in traffic.values()))
    if strategy == "flat":
        counts = {a: _judge(rows, {t for t, _ in rows if _flat(t)}, 1 / SHARE) for a, rows in traffic.items()}
        return Night(counts, COST * sum(c.n for c in counts.values()))
    recent = history[-BASELINE_NIGHTS:]
    rates = {}
    for app in traffic:
        past = WeightedCounts()
        for h in recent:
            past = _add(past, h.counts.get(app, WeightedCounts()))
        rates[app] = estimate(past).rate
    # as the planner sizes strata (judgeflow/sampling/planner.py): the rule's family is overall + each app
    detect = None if ablate == "power" else Detect(MIN_INCREASE, alpha, tests=1 + len(traffic), ratio=BASELINE_NIGHTS)
    plan = allocate([StratumInput(a, len(rows), COST, rates[a]) for a, rows in traffic.items()],
                    budget_usd=budget, min_samples=settings().alert_min_samples, detect=detect)
    night = date(2026, 1, 1) + timedelta(days=day)
    counts = {}
    for a in plan.strata:
        chosen = select([t for t, _ in traffic[a.name]], a.judged, night)
        counts[a.name] = _judge(traffic[a.name], chosen, 1 / a.inclusion_prob)
    return Night(counts, plan.cost_usd)


def _total(nights: list[Night], app: str | None) -> WeightedCounts:
    """One app's counts (None: every app's) over ``nights``."""
    c = WeightedCounts()
    for h in nights:
        for a, counts in h.counts.items():
            if app is None or a == app:
                c = _add(c, counts)
    return c


@dataclass
class Outcome:
    fired: list[tuple[int, str]] = field(default_factory=list)  # (day, segment label)
    spend: list[float] = field(default_factory=list)


def simulate(strategy: str, seed: int, total: int, regressed_rate: float | None, alpha: float = ALPHA,
             ablate: str = "") -> Outcome:
    """One month; ``regressed_rate`` None: the control month. ``ablate``: "holm" decides each segment
    on its own p-value, "power" plans without the power step (to measure what each contributes)."""
    rng = random.Random(seed)
    rule = next(r for r in all_rules(settings(alpha)) if r.name == "toxicity_regression")
    budget = SHARE * COST * total
    history: list[Night] = []
    state: dict[str, str] = {}
    out = Outcome()
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # a week of history first, so the first night of the month has a baseline
    for day in range(-BASELINE_NIGHTS, DAYS):
        traffic = _traffic(rng, day, total, regressed_rate)
        night = _night(strategy, traffic, history, day, budget, alpha, ablate)
        if day >= 0:
            out.spend.append(night.spend)
        base = history[-BASELINE_NIGHTS:]
        history.append(night)
        if len(base) < BASELINE_NIGHTS or day < 0:
            continue
        segments = [(OVERALL, None)] + [(Segment("app", a), a) for a in APPS]
        family = [figures_from_counts(_total([night], app), _total(base, app), failed=0, evaluated_at=now,
                                      window_start=now, segment=segment)
                  for segment, app in segments]
        # one evaluation of the rule: p-values Holm-adjusted over the segments tested, as the real evaluation does
        for figures in (family if ablate == "holm" else correct_for_family(rule, family)):
            segment = figures.segment
            _, new_state, transition = decide(rule, figures, state=state.get(segment.label, "ok"),
                                              last_notified_at=None, now=now)
            state[segment.label] = new_state
            if transition == "fired":
                out.fired.append((day, segment.label or "overall"))
    return out


# how a real run judges (bench/sampled_nights.py): per-trace cost lognormal about the stratum's mean
# (log-sd 0.3), 16 pairs in flight under the real RunBudget, the planner's headroom and its top-ups
REAL_RUN = dict(cost_sd=0.3, in_flight=16, headroom_z=HEADROOM_Z, top_up=True)


def _words(bias: float) -> str:
    """What ``estimate_bias`` means, exactly: the estimate over the real mean cost."""
    if bias == 1.0:
        return "estimates right on average"
    if bias < 1.0:
        return f"real costs {1 / bias - 1:.0%} above the estimate (estimates x{bias:g})"
    return f"estimates {bias - 1:.0%} above the real cost (x{bias:g})"


def nights_report(nights: int, base_seed: int) -> None:
    """Issue 46's measurements over ``nights`` fresh seeds per scenario
    (bench/sampled_nights.py): billed spend against the budget, interval
    coverage per stratum size, maximum-rule pages on a quiet night, and
    detection at the plan's claimed rise and at the rule's minimum."""
    from bench.sampled_nights import LONG, covered, maximum_rule, mixed_strata, pages, quiet_strata, run_night
    from judgeflow.sampling.power import min_detectable_rise, rule_power, segment_alpha

    print(f"\n-- simulated nights: {nights} per scenario, seeds {base_seed}+, 6-10 strata of 0.5-50%, "
          "failing 0.5-40%, short ($0.001) or long ($0.004) traces on average, budget 12% of the full cost; "
          "as a real run: " + ", ".join(f"{k} {v}" for k, v in REAL_RUN.items()) + "; the late reserve at the "
          "late share")
    for late, bias in ((0.0, 1.0), (0.1, 1.0), (0.2, 0.7), (0.1, 1.47)):
        ratios, over, hit, by_size, worst = [], 0, 0, {}, 0.0
        for seed in range(base_seed, base_seed + nights):
            night = run_night(mixed_strata(random.Random(seed), 3000), seed=seed, budget_share=0.12,
                              late_share=late, estimate_bias=bias, late_reserve=late, **REAL_RUN)
            ratios.append(night.billed / night.budget)
            worst = max(worst, night.overrun / LONG)
            over += night.billed > night.budget + REAL_RUN["in_flight"] * LONG
            hit += covered(estimate(night.counts()), night.truth())
            for name in {t.stratum for t in night.traces}:
                size = sum(1 for t in night.traces if t.stratum == name)
                band = "<50" if size < 50 else "50-299" if size < 300 else ">=300"
                got = by_size.setdefault(band, [0, 0])
                got[0] += covered(estimate(night.counts(name)), night.truth(name))
                got[1] += 1
        bands = ", ".join(f"{b} traces {h / n:.1%} of {n}" for b, (h, n) in sorted(by_size.items()))
        print(f"late {late:.0%}, {_words(bias)}: billed/budget mean {statistics.mean(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}); over budget + 16 long traces: {over}; largest "
              f"overrun {worst:.2f} long traces; overall coverage {hit / nights:.1%}; per stratum: {bands}")
    rule = maximum_rule(0.05, 50)
    sampled = full = overall = 0
    for seed in range(base_seed + 50_000, base_seed + 50_000 + nights):
        night = run_night(quiet_strata(3000), seed=seed, budget_share=0.12, **REAL_RUN)
        got = pages(rule, night, full=False)
        sampled, overall = sampled + bool(got), overall + ("overall" in got)
        full += bool(pages(rule, night, full=True))
    print(f"every app at 3%, maximum 5%, 12% budget: nights with a false maximum page {sampled / nights:.1%} "
          f"(overall page {overall / nights:.1%}); judging everything {full / nights:.1%}")
    _detection_report(nights, base_seed)
    alpha = segment_alpha(0.05, 3)
    for n, p0 in ((50, 0.02), (60, 0.02), (150, 0.05), (400, 0.10)):
        d = min_detectable_rise(n, 7 * n, p0, alpha=alpha, min_increase=0.05)
        for rise, label in ((d, "claimed rise"), (0.05, "the rule's minimum")):
            rng, fired = random.Random(base_seed + n), 0
            for _ in range(nights):
                x = sum(rng.random() < p0 + rise for _ in range(n))
                y = sum(rng.random() < p0 for _ in range(7 * n))
                fired += (x / n - y / (7 * n) + 1e-12 >= 0.05) and fisher_greater(x, n, y, 7 * n) <= alpha
            exact = rule_power(n, 7 * n, p0, p0 + rise, alpha=alpha, min_increase=0.05)
            noise = 1.96 * math.sqrt(exact * (1 - exact) / nights)  # where 95% of such measurements fall
            print(f"n {n}, baseline {7 * n}, rate {p0:.0%}: {label} +{rise * 100:.1f} pts fires on the first night "
                  f"in {fired / nights:.1%} of seeds (exact power {exact:.1%}, +-{noise:.1%} over {nights} seeds)")


def _detection_report(nights: int, base_seed: int) -> None:
    """Detection through the plan's own path (bench/sampled_nights.py
    ``detection_night``): a random stratum the plan claims a rise for rises by
    that claim (or by the rule's minimum); the rule over every segment, Holm-adjusted.
    6,000 traces a night, so that most nights have a stratum judged enough to claim a rise."""
    from bench.sampled_nights import detection_night

    for late, bias, at in ((0.0, 1.0, "claimed"), (0.1, 1.0, "claimed"), (0.1, 1.47, "claimed"),
                           (0.0, 0.7, "claimed"), (0.0, 1.0, "minimum")):
        rows = [detection_night(seed, at=at, late_share=late, estimate_bias=bias, total=DETECTION_TRAFFIC,
                                **REAL_RUN) for seed in range(base_seed + 70_000, base_seed + 70_000 + nights)]
        rows = [r for r in rows if r.claimed is not None]
        if not rows:
            print(f"detection at the {at} rise, late {late:.0%}, {_words(bias)}: no night with a claim")
            continue
        fired = sum(r.fired for r in rows) / len(rows)
        se = math.sqrt(fired * (1 - fired) / len(rows))
        small = [r for r in rows if r.planned <= 60]
        print(f"detection at the {at} rise, late {late:.0%}, {_words(bias)}: {len(rows)} nights with a claim; "
              f"fires on the first night in {fired:.1%} (+-{1.96 * se:.1%}); exact power at the true rate for "
              f"what was judged {statistics.mean(r.exact for r in rows):.1%}; strata planned at <= 60: "
              f"{sum(r.fired for r in small) / max(len(small), 1):.1%} of {len(small)}; judged fewer than planned "
              f"in {sum(r.judged_on_time < r.planned for r in rows)}")


# Issue 60's seeds, fixed before the first run of this report (2026-11-29 07:10 UTC) and not tuned on:
HEADROOM_SEEDS = 810_000  # 810000-810399: spend, each stratum's planned count, coverage
DETECTION_SEEDS = 811_000  # 811000-811399: detection at the plan's claimed rise
LATE_SEEDS = 812_000  # 812000-812399: late traces failing twice as often


def headroom_report(nights: int) -> None:
    """Issue 60, items 3, 5 and 7: nights with per-trace cost variation (lognormal
    log-sd 0.3, mean the stratum's), 16 pairs in flight and the real run budget's
    stop (bench/sampled_nights.py), planned with and without headroom."""
    from bench.sampled_nights import covered, detection_night, mixed_strata, run_night

    print(f"\n-- issue 60: {nights} nights per scenario; 3,000 traces of 6-10 strata, budget 12% of the full cost, "
          "per-trace cost lognormal (log-sd 0.3, mean the stratum's), 16 pairs in flight, the real RunBudget")
    after = f"headroom z {HEADROOM_Z}, then a top-up at tonight's prices"
    for z, label in ((0.0, "no headroom (before)"), (HEADROOM_Z, after)):
        for bias, words in ((1.0, "estimates right on average"), (1 / 1.3, "real costs 30% above the estimate"),
                            (2.0, "the estimate twice the bill")):
            ratios, all_reached, strata_short, strata_n, at_min_short, at_min, hit = [], 0, 0, 0, 0, 0, 0
            for seed in range(HEADROOM_SEEDS, HEADROOM_SEEDS + nights):
                night = run_night(mixed_strata(random.Random(seed), 3000), seed=seed, budget_share=0.12,
                                  estimate_bias=bias, cost_sd=0.3, in_flight=16, headroom_z=z, top_up=z > 0)
                ratios.append(night.billed / night.budget)
                short = [s for s, n in night.planned.items() if night.judged_on_time(s) < n]
                all_reached += not short
                strata_short, strata_n = strata_short + len(short), strata_n + len(night.planned)
                for s, n in night.planned.items():
                    if n == night.minimum[s] and n > 0:
                        at_min += 1
                        at_min_short += night.judged_on_time(s) < n
                hit += covered(estimate(night.counts()), night.truth())
            print(f"{label}, {words}: billed/budget mean {statistics.mean(ratios):.3f} (min {min(ratios):.3f}, "
                  f"max {max(ratios):.3f}); nights with every stratum at its planned count {all_reached / nights:.1%}; "
                  f"strata short of their plan {strata_short / max(strata_n, 1):.1%} of {strata_n}; planned at the "
                  f"minimum and short {at_min_short} of {at_min}; coverage {hit / nights:.1%}")
    for z, label in ((0.0, "no headroom (before)"), (HEADROOM_Z, after)):
        rows = [detection_night(seed, total=DETECTION_TRAFFIC, cost_sd=0.3, in_flight=16, headroom_z=z, top_up=z > 0)
                for seed in range(DETECTION_SEEDS, DETECTION_SEEDS + nights)]
        rows = [r for r in rows if r.claimed is not None]
        fired = sum(r.fired for r in rows) / len(rows)
        se = math.sqrt(fired * (1 - fired) / len(rows))
        print(f"detection at the claimed rise, {label}: {len(rows)} nights with a claim; fires on the first night "
              f"in {fired:.1%} (+-{1.96 * se:.1%}); exact power for what was judged "
              f"{statistics.mean(r.exact for r in rows):.1%}; target judged fewer than planned in "
              f"{sum(r.judged_on_time < r.planned for r in rows)}")
    for reserve, label in ((0.0, "no reserve (before)"), (0.1, "late reserve 10% (the late share history shows)")):
        on_share, late_share, hit = [], [], 0
        for seed in range(LATE_SEEDS, LATE_SEEDS + nights):
            night = run_night(mixed_strata(random.Random(seed), 3000), seed=seed, budget_share=0.12, late_share=0.1,
                              late_factor=2.0, cost_sd=0.3, in_flight=16, headroom_z=HEADROOM_Z, late_reserve=reserve,
                              top_up=True)
            on = [t for t in night.traces if not t.late]
            late = [t for t in night.traces if t.late]
            on_share.append(sum(t.id in night.judged for t in on) / len(on))
            late_share.append(sum(t.id in night.judged for t in late) / max(len(late), 1))
            hit += covered(estimate(night.counts()), night.truth())
        print(f"10% late, late traces failing twice as often, {label}: judged {statistics.mean(on_share):.1%} of "
              f"on-time and {statistics.mean(late_share):.1%} of late traces; coverage {hit / nights:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--traffic", type=int, default=6000, help="traces per night")
    parser.add_argument("--alpha", type=float, default=ALPHA, help="JUDGEFLOW_REGRESSION_ALPHA")
    parser.add_argument("--strategies", default="all,flat,budget", help="comma-separated, of all, flat, budget")
    parser.add_argument("--ablate", choices=("holm", "power"), default="",
                        help="leave out the Holm correction or the planner's power step, to measure each")
    parser.add_argument("--regressed-rate", type=float, default=REGRESSED_RATE,
                        help=f"{TARGET}'s failing rate from day {REGRESSION_DAY} on")
    parser.add_argument("--nights", type=int, default=0,
                        help="also run the simulated-night measurements (issue 46) over this many seeds per scenario")
    parser.add_argument("--nights-seed", type=int, default=460_000, help="the first seed of those nights")
    parser.add_argument("--headroom", type=int, default=0,
                        help="also run issue 60's nights (cost variation, 16 in flight) over this many seeds each")
    args = parser.parse_args()
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    if args.headroom:
        headroom_report(args.headroom)
    if args.nights:
        nights_report(args.nights, args.nights_seed)
    if (args.headroom or args.nights) and args.seeds == 0:
        return
    print(f"regression rule: rise >= {MIN_INCREASE:.0%} points, Fisher p <= {args.alpha:g} "
          f"{'per segment, uncorrected' if args.ablate == 'holm' else 'Holm-adjusted over the segments tested'}, "
          ">= 50 judged in the night and in the 7 nights before, per app and overall"
          + ("; planner without its power step" if args.ablate == "power" else ""))
    print(f"{args.traffic} traces/night, apps (share, failing rate): {APPS}; {TARGET} goes to "
          f"{args.regressed_rate:.0%} on day {REGRESSION_DAY}; budget {SHARE:.0%} of the full cost "
          f"(${SHARE * COST * args.traffic:.2f}/night)")
    print(f"{'strategy':<8} {'seed':>4} {'nights to alert':>16} {'false alerts (control)':>23} "
          f"{'spend/night mean (max)':>24}")
    summary: dict[str, list] = {}
    for strategy in args.strategies.split(","):
        for seed in range(args.seeds):
            hit = simulate(strategy, seed, args.traffic, args.regressed_rate, args.alpha, args.ablate)
            control = simulate(strategy, 10_000 + seed, args.traffic, None, args.alpha, args.ablate)
            target = [d for d, s in hit.fired if s == f"app={TARGET}" and d >= REGRESSION_DAY]
            nights = target[0] - REGRESSION_DAY + 1 if target else None
            false = len(control.fired) + len([1 for d, s in hit.fired if d < REGRESSION_DAY])
            spend = hit.spend + control.spend
            summary.setdefault(strategy, []).append((nights, false, max(spend)))
            print(f"{strategy:<8} {seed:>4} {('never' if nights is None else str(nights)):>16} {false:>23} "
                  f"{f'${statistics.mean(spend):.2f} (${max(spend):.2f})':>24}")
    print()
    for strategy, rows in summary.items():
        found = [n for n, _, _ in rows if n is not None]
        print(f"{strategy}: alert after {found or 'never'} night(s) "
              f"({len(rows) - len(found)} of {len(rows)} never); false alerts {sum(f for _, f, _ in rows)}; "
              f"max spend/night ${max(s for _, _, s in rows):.2f}")


if __name__ == "__main__":
    from judgeflow.run.metric_door import open_metrics

    open_metrics()  # the script is its own entry point: its metrics open once, before any settings
    main()
