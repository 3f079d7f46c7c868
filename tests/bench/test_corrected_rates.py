"""The corrected-rate benchmark in small: one cell of bench/corrected_rates.py over 200 seeds fixed in
advance (858400-858599, apart from the bench's 858000-858399), judgeflow's estimator covering the true
rate, and the same check failing a stratified Wald interval on the same windows (so it can fail)."""

from __future__ import annotations

import math

from bench.corrected_rates import Cell, run_cell
from judgeflow.alerts.corrected import Corrected, VerdictLabels, corrected_rate
from judgeflow.alerts.estimates import Z95, WeightedCounts

SEEDS = range(858400, 858600)
# the hard case: a 1% rate, 50 labels, a judge that never calls a passing reply a failure but misses
# 30% of the failures: every label of its fail verdict fails, and the pass verdict's few failures
# (0.3% of it) are rarely labelled, so both strata usually show a share of exactly 1 and 0
CELL = Cell(fpr=0.0, fnr=0.3, theta=0.01, labels=50, night="full")
CELL_INDEX = 0


def wald(judged: WeightedCounts, fail: VerdictLabels, passed: VerdictLabels) -> Corrected:
    """The textbook stratified Wald interval, ``θ̂ ± z sqrt(Σ W_h² p̂_h (1 - p̂_h) / n_h)``: what the
    estimator must not be (it says a stratum with no failing label holds none)."""
    w_fail = judged.bad / judged.n
    theta = w_fail * fail.rate + (1 - w_fail) * passed.rate
    v = sum(w * w * s.rate * (1 - s.rate) / s.n for w, s in ((w_fail, fail), (1 - w_fail, passed)))
    half = Z95 * math.sqrt(v)
    return Corrected(theta, max(0.0, theta - half), min(1.0, theta + half), fail.n + passed.n)


def test_the_corrected_interval_covers_the_true_rate_where_a_wald_interval_does_not():
    ours = run_cell(CELL, CELL_INDEX, SEEDS)
    theirs = run_cell(CELL, CELL_INDEX, SEEDS, estimator=wald)
    assert ours.given == ours.windows == len(SEEDS)
    # 95% nominal; 200 windows put the share's standard error near 1.5 points
    assert ours.covered / ours.given >= 0.91
    # Wald's interval has no width where a stratum's labels all agree, and misses the rate
    assert theirs.covered / theirs.given < 0.5
    # the judged rate misses 30% of the failures; the corrected one is unbiased
    assert ours.judged_bias < -0.002 and abs(ours.corrected_bias) < 0.001
