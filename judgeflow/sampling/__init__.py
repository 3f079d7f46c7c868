"""The sample budget: which of a night's new traces to judge when judging them
all would cost more than ``JUDGEFLOW_SAMPLE_BUDGET_USD``.

Pure parts: :mod:`~judgeflow.sampling.allocation` (how many per stratum),
:mod:`~judgeflow.sampling.selection` (which ones, deterministically) and
:mod:`~judgeflow.sampling.power` (the smallest rise a stratum's sample can
show). Database parts: :mod:`~judgeflow.sampling.strata` (counting the
night's traffic per stratum, costs and failing rates from history) and
:mod:`~judgeflow.sampling.decisions` (the ``judgeflow.sample_decisions`` rows).
The task that plans and records a night is ``judgeflow.tasks.sampling``.
"""
