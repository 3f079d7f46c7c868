"""The plan's table, as `judgeflow score --plan` prints it and the
``judgeflow-sample-plan`` artifact shows it (with what was spent)."""

from __future__ import annotations

from judgeflow.sampling.planner import NightPlan


def _pct(v: float | None) -> str:
    return "n/a (too few to decide)" if v is None else f"+{v * 100:.1f} pts"


def plan_lines(plan: NightPlan, *, spent: bool = False) -> list[list[str]]:
    head = ["stratum", "traffic", "to judge", "est. cost", "smallest rise detected (80% power)"]
    if spent:
        head.append("spent")
    rows = [head]
    for r in plan.rows:
        row = [r.stratum, str(r.traffic), str(r.judged), f"${r.est_cost_usd:.4f}", _pct(r.min_detectable_rise)]
        if spent:
            row.append("-" if r.spent_usd is None else f"${r.spent_usd:.4f}")
        rows.append(row)
    return rows


def plan_text(plan: NightPlan, *, spent: bool = False) -> str:
    rows = plan_lines(plan, spent=spent)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    head = (f"night {plan.night.isoformat()}: "
            + ("no sample budget: every new trace is judged" if plan.budget_usd is None else
               f"sample budget ${plan.budget_usd:.4f}" + (f" (${plan.committed_before_usd:.4f} committed by earlier "
                                                          "runs tonight)" if plan.committed_before_usd else "")
               + (f"; judging all {sum(r.traffic for r in plan.rows)} new traces costs ${plan.full_cost_usd:.4f}"
                  + ("" if plan.sampled else ", which fits: every new trace is judged"))))
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines + plan.notes()[1 if plan.sampled else 0:])


def plan_markdown(plan: NightPlan, *, spent: bool = True) -> str:
    rows = plan_lines(plan, spent=spent)
    out = [plan_text(plan).splitlines()[0], "", "| " + " | ".join(rows[0]) + " |",
           "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out + [""] + [f"- {n}" for n in plan.notes()])
