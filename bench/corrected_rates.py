"""Do corrected rates cover the true rate? Simulated windows judged by an imperfect judge, labelled in
part by people, estimated by judgeflow's own estimator (judgeflow.alerts.corrected.corrected_rate).

One simulated window: ``N`` = 10,000 traces, each truly failing with probability ``theta``; a judge
that calls a failing trace "pass" with probability ``fnr`` and a passing trace "fail" with
probability ``fpr``; then a labelled draw of ``labels`` results, stratified by the judge's verdict,
half in each verdict (the rarer verdict oversampled; a stratum smaller than its half is taken whole
and the rest goes to the other), without replacement, and people's labels are the truth.

- A **full night** judges every trace (weights 1); the draw is made from the window's own results,
  so each stratum's finite-population correction applies.
- A **sampled night** judges two apps of 5,000 traces each, the first failing at ``theta / 2``
  judged at 10% (weight 10), the second at ``1.5 theta`` judged at 30% (weight 10/3): 2,000 judged
  results, 20% of the traffic. The draw is made from the judged results, each label weighted by its
  result's weight, and the window's judged shares carry the sampled night's variance.

Reported per cell: the coverage of the window's true failing share by the corrected 95% interval
(goal: at least 93%), the interval's mean width against Wilson's interval from the same number of
labels drawn as a simple random sample of the window (labels alone), the labels-alone interval's
coverage, and the judged rate's bias (the judged rate minus the truth; on a sampled night the
weighted judged rate). ``given`` is the share of windows with enough labels for a corrected rate.

Seeds were fixed before any run: the window ``k`` of cell ``c`` uses numpy's generator seeded with
``(seed, c)``, ``seed`` in 858000-858399 (``--seeds 400``, the default; cells are numbered in the
grid's order below). The default test (tests/bench/test_corrected_rates.py) uses 858400-858699.

    .venv/bin/python -m bench.corrected_rates [--seeds 400] [--first-seed 858000] [--quick]

What it simplifies: the judge's errors are independent of everything but the truth (the same
``fpr`` and ``fnr`` in the labelled draw as in the window: the estimator's assumption, held here by
construction); people never err; one draw, from the window itself.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from judgeflow.alerts.corrected import Corrected, VerdictLabels, corrected_rate
from judgeflow.alerts.estimates import StratumCounts, WeightedCounts, estimate, wilson

N = 10_000
ERRORS = (0.0, 0.05, 0.1, 0.2, 0.3)
THETAS = (0.01, 0.10, 0.40)
LABELS = (50, 150, 500)
NIGHTS = ("full", "sampled")
# judges no better than chance: fpr + fnr = 1
CHANCE = ((0.5, 0.5), (0.3, 0.7))
FIRST_SEED = 858000
SEEDS = 400
# the sampled night: (share of traffic, failing rate / theta, inclusion probability) per app
APPS = ((0.5, 0.5, 0.1), (0.5, 1.5, 0.3))

Estimator = Callable[[WeightedCounts, VerdictLabels, VerdictLabels], Corrected]


@dataclass(frozen=True)
class Cell:
    fpr: float
    fnr: float
    theta: float
    labels: int
    night: str


def cells() -> list[Cell]:
    """Every cell, in the order their numbers (the second half of each window's seed) follow."""
    judges = [(fpr, fnr) for fpr in ERRORS for fnr in ERRORS] + list(CHANCE)
    return [Cell(fpr, fnr, theta, n, night) for fpr, fnr in judges for theta in THETAS for n in LABELS
            for night in NIGHTS]


@dataclass(frozen=True)
class Window:
    truth: float
    judged: WeightedCounts
    fail: VerdictLabels
    passed: VerdictLabels
    alone_fail: int  # failing labels among `labels` drawn as a simple random sample of the window


def _split(n: int, fail_size: int, pass_size: int) -> tuple[int, int]:
    """Half the draw in each verdict; a stratum smaller than its half is taken whole."""
    n_fail = min(fail_size, n // 2)
    n_pass = min(pass_size, n - n_fail)
    return min(fail_size, n - n_pass), n_pass


def _full_night(rng: np.random.Generator, c: Cell) -> Window:
    k = int(rng.binomial(N, c.theta))
    tf_jf, tp_jf = int(rng.binomial(k, 1 - c.fnr)), int(rng.binomial(N - k, c.fpr))
    fail_size = tf_jf + tp_jf
    n_fail, n_pass = _split(c.labels, fail_size, N - fail_size)
    x_fail = int(rng.hypergeometric(tf_jf, tp_jf, n_fail)) if n_fail else 0
    x_pass = int(rng.hypergeometric(k - tf_jf, N - k - tp_jf, n_pass)) if n_pass else 0
    return Window(k / N, WeightedCounts.unweighted(N, fail_size),
                  VerdictLabels.counted(n_fail, x_fail, population=fail_size),
                  VerdictLabels.counted(n_pass, x_pass, population=N - fail_size),
                  int(rng.hypergeometric(k, N - k, c.labels)))


def _sampled_night(rng: np.random.Generator, c: Cell) -> Window:
    strata, truth, cells_by_verdict = [], 0, {True: [], False: []}  # verdict -> [(count, fails, weight)]
    for share, factor, prob in APPS:
        size = int(N * share)
        k = int(rng.binomial(size, min(1.0, c.theta * factor)))
        tf_jf, tp_jf = int(rng.binomial(k, 1 - c.fnr)), int(rng.binomial(size - k, c.fpr))
        population = [tf_jf, k - tf_jf, tp_jf, size - k - tp_jf]  # (truth, verdict) cells
        judged = rng.multivariate_hypergeometric(population, round(size * prob))
        strata.append(StratumCounts(int(judged.sum()), int(judged[0] + judged[2]), prob))
        cells_by_verdict[True] += [(int(judged[0]), True, 1 / prob), (int(judged[2]), False, 1 / prob)]
        cells_by_verdict[False] += [(int(judged[1]), True, 1 / prob), (int(judged[3]), False, 1 / prob)]
        truth += k
    judged = WeightedCounts.from_strata(strata)
    sizes = {v: sum(n for n, _, _ in cs) for v, cs in cells_by_verdict.items()}
    n_fail, n_pass = _split(c.labels, sizes[True], sizes[False])
    drawn = {}
    for verdict, n in ((True, n_fail), (False, n_pass)):
        cs = cells_by_verdict[verdict]
        picks = rng.multivariate_hypergeometric([n for n, _, _ in cs], n) if n else [0] * len(cs)
        drawn[verdict] = VerdictLabels.of(
            (fails, w) for (_, fails, w), m in zip(cs, picks) for _ in range(int(m)))
    return Window(truth / N, judged, drawn[True], drawn[False], int(rng.hypergeometric(truth, N - truth, c.labels)))


def window(c: Cell, index: int, seed: int) -> Window:
    rng = np.random.default_rng([seed, index])
    return _full_night(rng, c) if c.night == "full" else _sampled_night(rng, c)


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    windows: int
    given: int  # windows with a corrected rate
    covered: int
    width: float  # mean corrected interval width (windows with a rate)
    alone_width: float
    alone_covered: int
    judged_bias: float
    corrected_bias: float


def run_cell(c: Cell, index: int, seeds: range, estimator: Estimator = corrected_rate) -> CellResult:
    given = covered = alone_covered = 0
    widths, alone_widths, judged_err, corrected_err = [], [], [], []
    for seed in seeds:
        w = window(c, index, seed)
        alone = w.alone_fail / c.labels
        lo, hi = wilson(alone, c.labels)
        alone_widths.append(hi - lo)
        alone_covered += lo <= w.truth <= hi
        judged_err.append(estimate(w.judged).rate - w.truth)
        r = estimator(w.judged, w.fail, w.passed)
        if r.rate is None:
            continue
        given += 1
        covered += r.ci_low <= w.truth <= r.ci_high
        widths.append(r.ci_high - r.ci_low)
        corrected_err.append(r.rate - w.truth)
    mean = lambda xs: statistics.fmean(xs) if xs else math.nan  # noqa: E731
    return CellResult(c, len(seeds), given, covered, mean(widths), mean(alone_widths), alone_covered,
                      mean(judged_err), mean(corrected_err))


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.1%}"


def summary(results: list[CellResult]) -> list[str]:
    """Coverage over every cell, then per (theta, labels, night) over the 25 judges, then the chance judges."""
    coverage = [r.covered / r.given for r in results if r.given]
    chance = [r for r in results if r.cell.fpr + r.cell.fnr == 1.0]
    grid = [r for r in results if r not in chance]
    lines = [f"cells: {len(results)}; windows with a corrected rate: "
             f"{sum(r.given for r in results)} of {sum(r.windows for r in results)}",
             f"coverage over cells: min {min(coverage):.1%}, median {statistics.median(coverage):.1%}, "
             f"cells below 93%: {sum(c < 0.93 for c in coverage)} of {len(coverage)}",
             "corrected rate's mean error over cells: "
             f"{min(r.corrected_bias for r in results if r.given):+.4f} to "
             f"{max(r.corrected_bias for r in results if r.given):+.4f}",
             "chance judges, width corrected / labels alone: "
             f"{min(r.width / r.alone_width for r in chance):.2f} to {max(r.width / r.alone_width for r in chance):.2f}",
             "",
             "| true rate | labels | night | coverage (mean, min over 25 judges) | width: corrected / labels alone"
             " (mean over judges) | labels alone: coverage | judged rate's bias (range over judges) |",
             "|---|---|---|---|---|---|---|"]
    for theta in THETAS:
        for n in LABELS:
            for night in NIGHTS:
                rs = [r for r in grid if (r.cell.theta, r.cell.labels, r.cell.night) == (theta, n, night)]
                cov = [r.covered / r.given for r in rs if r.given]
                lines.append(
                    f"| {theta:.0%} | {n} | {night} | {statistics.fmean(cov):.1%}, {min(cov):.1%} | "
                    f"{statistics.fmean(r.width for r in rs):.3f} / {statistics.fmean(r.alone_width for r in rs):.3f} | "
                    f"{statistics.fmean(r.alone_covered / r.windows for r in rs):.1%} | "
                    f"{min(r.judged_bias for r in rs):+.3f} to {max(r.judged_bias for r in rs):+.3f} |")
    lines += ["", "judges no better than chance (fpr + fnr = 1):", "",
              "| fpr, fnr | true rate | labels | night | coverage | width: corrected / labels alone | judged rate's bias |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.cell.fpr}, {r.cell.fnr} | {r.cell.theta:.0%} | {r.cell.labels} | {r.cell.night} | "
              f"{_pct(r.covered / r.given if r.given else math.nan)} | {r.width:.3f} / {r.alone_width:.3f} | "
              f"{r.judged_bias:+.3f} |" for r in chance]
    worst = sorted((r for r in results if r.given), key=lambda r: r.covered / r.given)[:8]
    lines += ["", "lowest coverage:"] + [
        f"  fpr {r.cell.fpr} fnr {r.cell.fnr} theta {r.cell.theta} labels {r.cell.labels} {r.cell.night}: "
        f"{r.covered / r.given:.1%} of {r.given}" for r in worst]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--first-seed", type=int, default=FIRST_SEED)
    parser.add_argument("--quick", action="store_true", help="only the judges with fpr = fnr")
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.perf_counter()
    results = [run_cell(c, i, seeds) for i, c in enumerate(cells())
               if not args.quick or c.fpr == c.fnr or c.fpr + c.fnr == 1.0]
    print(f"seeds {seeds.start}-{seeds.stop - 1}; {platform.node()}, {os.cpu_count()} cores; "
          f"{time.perf_counter() - started:.0f} s")
    print("\n".join(summary(results)))


if __name__ == "__main__":
    main()
