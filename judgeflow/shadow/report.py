"""The shadow report: computed from ``judgeflow.shadow_results`` alone (each row
holds the candidate's result and the current judge's, copied when the shadow
run scored it), rendered as text (CLI), JSON (``--json``) and markdown (the
Prefect artifact)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from sqlalchemy import Connection, text

from judgeflow.shadow.agreement import Confusion, kappa, kappa_undefined, mean_difference, rate_difference

DISAGREEMENTS = 10  # traces listed per metric where the judges disagree most
REASON_CHARS = 300


class JudgeCost(BaseModel):
    """Per (trace, metric) pair of the sample, under one judge."""

    judge_calls: float
    prompt_tokens: float
    completion_tokens: float
    cost_usd: float | None  # None: the judge's results carry no cost (no known price)


class SegmentFigures(BaseModel):
    segment: str
    compared: int
    current_failing_rate: float | None
    candidate_failing_rate: float | None
    difference: float | None
    difference_ci: list[float] | None


class Disagreement(BaseModel):
    trace_id: str
    segment: str
    current_score: float | None
    current_passed: bool | None
    current_reason: str | None
    candidate_score: float | None
    candidate_passed: bool | None
    candidate_reason: str | None


class MetricShadow(BaseModel):
    metric: str
    current_judge: str  # "model (metric version)", the models seen when several
    candidate_judge: str
    sampled: int
    compared: int  # scored by both: the pairs every figure below is about
    candidate_failed: int
    candidate_skipped: int
    confusion: dict[str, int]
    kappa: float | None
    kappa_ci: list[float] | None
    kappa_undefined: str | None = None  # why kappa has no value (a judge gave one class only)
    current_failing_rate: float | None
    candidate_failing_rate: float | None
    difference: float | None  # candidate minus current
    difference_ci: list[float] | None
    mean_score_difference: float | None  # candidate minus current
    mean_score_difference_ci: list[float] | None
    current: JudgeCost
    candidate: JudgeCost
    segments: list[SegmentFigures]
    disagreements: list[Disagreement]


class ShadowReport(BaseModel):
    shadow_run_id: str
    candidate_model: str
    segment_by: str | None
    per_segment: int
    metrics: list[MetricShadow]

    def render_text(self) -> str:
        return render(self, markdown=False)

    def render_markdown(self) -> str:
        return render(self, markdown=True)


def _rows(conn: Connection, shadow_run_id: str) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(text(
        "SELECT * FROM judgeflow.shadow_results WHERE shadow_run_id = :id ORDER BY metric, trace_id"
    ), {"id": shadow_run_id}).mappings()]


def _judges(rows: list[dict], model: str, version: str) -> str:
    seen = sorted({f"{r[model]} ({r[version]})" for r in rows if r[model] or r[version]})
    return ", ".join(seen) or "-"


def _cost(rows: list[dict], prefix: str) -> JudgeCost:
    n = max(1, len(rows))
    costs = [r[f"{prefix}cost_usd"] for r in rows if r[f"{prefix}cost_usd"] is not None]
    return JudgeCost(
        judge_calls=sum(r[f"{prefix}judge_calls"] for r in rows) / n,
        prompt_tokens=sum(r[f"{prefix}prompt_tokens"] for r in rows) / n,
        completion_tokens=sum(r[f"{prefix}completion_tokens"] for r in rows) / n,
        cost_usd=(sum(costs) / n) if costs else None,
    )


def _fails(passed: bool | None) -> bool:
    return passed is not True


def _cut(value: str | None) -> str | None:
    if value is None:
        return None
    value = " ".join(value.split())
    return value if len(value) <= REASON_CHARS else value[: REASON_CHARS - 1] + "…"


def _ci(interval) -> list[float] | None:
    return None if interval is None else interval.as_json()


def metric_figures(metric: str, rows: list[dict], *, top: int = DISAGREEMENTS) -> MetricShadow:
    both = [r for r in rows if r["status"] == "scored" and r["current_status"] == "scored"]
    confusion = Confusion.of([(_fails(r["current_passed"]), _fails(r["passed"])) for r in both])
    k, k_ci = kappa(confusion)
    diff, diff_ci = rate_difference(confusion)
    mean, mean_ci = mean_difference([r["score"] - r["current_score"] for r in both
                                     if r["score"] is not None and r["current_score"] is not None])
    n = confusion.n
    segments = []
    for segment in sorted({r["stratum"] for r in both}):
        c = Confusion.of([(_fails(r["current_passed"]), _fails(r["passed"])) for r in both if r["stratum"] == segment])
        d, d_ci = rate_difference(c)
        segments.append(SegmentFigures(
            segment=segment, compared=c.n, current_failing_rate=c.current_failing / c.n,
            candidate_failing_rate=c.candidate_failing / c.n, difference=d, difference_ci=_ci(d_ci),
        ))

    def gap(r: dict) -> tuple:
        flipped = _fails(r["current_passed"]) != _fails(r["passed"])
        return (not flipped, -abs((r["score"] or 0.0) - (r["current_score"] or 0.0)), r["trace_id"])

    disagreeing = [r for r in both if _fails(r["current_passed"]) != _fails(r["passed"])
                   or (r["score"] or 0.0) != (r["current_score"] or 0.0)]
    return MetricShadow(
        metric=metric,
        current_judge=_judges(rows, "current_judge_model", "current_metric_version"),
        candidate_judge=_judges([r for r in rows if r["status"] != "failed"], "judge_model", "metric_version"),
        sampled=len(rows),
        compared=n,
        candidate_failed=sum(r["status"] == "failed" for r in rows),
        candidate_skipped=sum(r["status"] == "skipped" for r in rows),
        confusion=confusion.as_json(),
        kappa=k,
        kappa_ci=_ci(k_ci),
        kappa_undefined=kappa_undefined(confusion),
        current_failing_rate=confusion.current_failing / n if n else None,
        candidate_failing_rate=confusion.candidate_failing / n if n else None,
        difference=diff,
        difference_ci=_ci(diff_ci),
        mean_score_difference=mean,
        mean_score_difference_ci=_ci(mean_ci),
        current=_cost(rows, "current_"),
        candidate=_cost(rows, ""),
        segments=segments,
        disagreements=[
            Disagreement(
                trace_id=r["trace_id"], segment=r["stratum"], current_score=r["current_score"],
                current_passed=r["current_passed"], current_reason=_cut(r["current_reason"]),
                candidate_score=r["score"], candidate_passed=r["passed"], candidate_reason=_cut(r["reason"]),
            )
            for r in sorted(disagreeing, key=gap)[:top]
        ],
    )


def build_report(conn: Connection, shadow_run_id: str, *, candidate_model: str, segment_by: str | None,
                 per_segment: int, top: int = DISAGREEMENTS) -> ShadowReport:
    rows = _rows(conn, shadow_run_id)
    metrics = sorted({r["metric"] for r in rows})
    return ShadowReport(
        shadow_run_id=shadow_run_id, candidate_model=candidate_model, segment_by=segment_by,
        per_segment=per_segment,
        metrics=[metric_figures(m, [r for r in rows if r["metric"] == m], top=top) for m in metrics],
    )


# --- rendering -------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _pts(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f} pts"


def _pts_ci(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci_num(ci: list[float] | None, digits: int = 3) -> str:
    return "-" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def _table(headers: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        def cell(c: str) -> str:
            return c.replace("|", "\\|").replace("\n", " ")
        return (["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
                + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows])
    cells = [headers] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _passed(value: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "-"}[value]


def render(report: ShadowReport, *, markdown: bool) -> str:
    h1, h2 = ("# ", "## ") if markdown else ("", "")
    out = [f"{h1}judgeflow shadow report: {report.candidate_model} beside the judge in force",
           "",
           f"Shadow run {report.shadow_run_id}; stratified by {report.segment_by or 'nothing (one stratum)'}, "
           f"up to {report.per_segment} pair(s) per segment. Failing = not passed. Differences are candidate "
           "minus current; intervals are 95%. Nothing here changed eval_results or an alert."]
    if not report.metrics:
        out += ["", "The sample was empty: no results of the judge in force to compare with."]
    for m in report.metrics:
        c = m.confusion
        out += ["", f"{h2}{m.metric}", "",
                f"current: {m.current_judge}; candidate: {m.candidate_judge}",
                f"{m.sampled} pair(s) sampled, {m.compared} scored by both"
                + (f", {m.candidate_failed} failed under the candidate" if m.candidate_failed else "")
                + (f", {m.candidate_skipped} skipped by the candidate" if m.candidate_skipped else ""),
                ""]
        out += _table(["figure", "value"], [
            ["Cohen's kappa (pass/fail)", m.kappa_undefined or f"{_num(m.kappa)} {_ci_num(m.kappa_ci)}"],
            ["both pass / both fail", f"{c['both_pass']} / {c['both_fail']}"],
            ["fail only under the candidate", str(c["only_candidate_fails"])],
            ["fail only under the current judge", str(c["only_current_fails"])],
            ["failing rate: current -> candidate",
             f"{_pct(m.current_failing_rate)} -> {_pct(m.candidate_failing_rate)}"],
            ["difference", f"{_pts(m.difference)} {_pts_ci(m.difference_ci)}"],
            ["mean score difference", f"{_num(m.mean_score_difference)} {_ci_num(m.mean_score_difference_ci)}"],
            ["judge calls per trace: current / candidate",
             f"{m.current.judge_calls:.2f} / {m.candidate.judge_calls:.2f}"],
            ["tokens per trace (prompt + completion): current / candidate",
             f"{m.current.prompt_tokens:.0f} + {m.current.completion_tokens:.0f} / "
             f"{m.candidate.prompt_tokens:.0f} + {m.candidate.completion_tokens:.0f}"],
            ["cost per trace: current / candidate", f"{_usd(m.current.cost_usd)} / {_usd(m.candidate.cost_usd)}"],
        ], markdown)
        if m.segments:
            out += ["", "Per segment"]
            out += _table(["segment", "n", "current", "candidate", "difference", "95% interval"], [
                [s.segment or "(all)", str(s.compared), _pct(s.current_failing_rate), _pct(s.candidate_failing_rate),
                 _pts(s.difference), _pts_ci(s.difference_ci)]
                for s in m.segments
            ], markdown)
        if m.disagreements:
            out += ["", "Where they disagree most"]
            out += _table(["trace", "segment", "current", "candidate", "current reason", "candidate reason"], [
                [d.trace_id, d.segment or "-", f"{_num(d.current_score, 2)} {_passed(d.current_passed)}",
                 f"{_num(d.candidate_score, 2)} {_passed(d.candidate_passed)}", d.current_reason or "-",
                 d.candidate_reason or "-"]
                for d in m.disagreements
            ], markdown)
    return "\n".join(out)
