"""The lines `judgeflow status` prints besides its table, from :func:`judgeflow.status.work.work_status`'s report."""

from __future__ import annotations

from datetime import datetime


def dead_delivery_line(report: dict) -> str | None:
    """The line `judgeflow status` prints about dead alert deliveries (None: there are none)."""
    from judgeflow.alerts.dead_letters import DeadSummary

    dead = report.get("dead_deliveries") or {}
    latest = dead.get("latest_at")
    return DeadSummary(dead.get("count", 0), None if latest is None else datetime.fromisoformat(latest),
                       tuple(dead.get("channels", ()))).line()


def status_notes(report: dict) -> list[str]:
    """`judgeflow status`'s lines about the source, its preset's skips and the Phoenix write-back."""
    lines = [f"source: {report['source']} (status counts only its results)", *report["source_notes"]]
    preset = report["source"].split(":", 1)[0]
    by_model: dict[str, list[str]] = {}
    for metric, model in report.get("judge_models", {}).items():
        by_model.setdefault(model, []).append(metric)
    if len(by_model) > 1:  # a metric judged by a model of its own
        lines.append("judged by: " + "; ".join(f"{model} ({', '.join(ms)})" for model, ms in by_model.items()))
    for metric, n in report.get("no_longer_scored", {}).items():
        # no guess at why: the results may be another settings' (`judgeflow demo`'s own metrics file)
        lines.append(f"{metric}: not scored now (no built-in, plugin or metrics file of these settings serves "
                     f"it); its {n} stored result(s) are kept")
    for metric, reasons in report["skipped_by_preset"].items():
        total = sum(reasons.values())
        why = "; ".join(f"{n}: {reason}" for reason, n in list(reasons.items())[:5])
        more = f"; and {len(reasons) - 5} other reason(s)" if len(reasons) > 5 else ""
        lines.append(f"{metric}: {total} of the skipped were skipped by the {preset} preset (no judge asked, "
                     f"no cost): {why}{more}")
    lines.extend(_batch_lines(report.get("batches_out") or []))
    lines.extend(_account_lines(report.get("account_limits") or []))
    wb = report.get("phoenix_write_back")
    if wb is not None:
        state = "on" if wb["on"] else "off (JUDGEFLOW_PHOENIX_WRITE_BACK)"
        lines.append(f"Phoenix write-back {state}: {wb['unwritten']} scored result(s) not yet written to Phoenix"
                     + (f" ({wb['waiting']} waiting for their next try)" if wb["waiting"] else "")
                     + ("; `judgeflow phoenix sync` writes them now" if wb["unwritten"] else ""))
        if wb["gone"]:
            lines.append(f"Phoenix write-back: {wb['gone']} scored result(s) not written for good: Phoenix no longer "
                         "holds their span (`judgeflow phoenix sync --repair` tries them once more)")
        if wb["unwritten"] and wb.get("last_error"):
            lines.append(f"Phoenix write-back's last error: {wb['last_error']}")
    return lines


def _batch_lines(batches: list[dict]) -> list[str]:
    """The judge's batches still out: each with its age; the next batch run collects them."""
    if not batches:
        return []
    lines = [f"judge batches out: {len(batches)} "
             "(`judgeflow score --batch` collects them: no line they carry is sent again)"]
    for b in batches:
        age = b["age_s"]
        shown = f"{age / 3600:.1f}h" if age >= 3600 else f"{age / 60:.0f}m" if age >= 60 else f"{age:.0f}s"
        lines.append(f"  {b['batch_id']}: {b['status']}, round {b['round']}, {b['lines']} line(s) of {b['model']}, "
                     f"out for {shown}")
    return lines


def _account_lines(limits: list[dict]) -> list[str]:
    """The account limit (JUDGEFLOW_JUDGE_RPM/TPM) as Prefect holds it: name, limit, decay, active slots."""
    lines = []
    for lim in limits:
        unit = "requests" if lim["slots_per_item"] != 1 else "tokens"
        whose = f" (the account: {lim['account']})" if lim.get("account") else ""
        head = f"account limit {lim['name']}{whose}: {lim['per_minute']:,} {unit}/min"
        if not lim["created"]:
            lines.append(f"{head}: not created yet in Prefect (the first run creates it)")
            continue
        per = lim["slots_per_item"]
        lines.append(f"{head} (Prefect global concurrency limit: limit {lim['limit']:,} slots, decay "
                     f"{lim['slot_decay_per_second']:,.2f} slots/s, active {lim['active_slots']:,} slots"
                     + (f", {per} slots a request" if per != 1 else "")
                     + f"; steady {lim['steady_per_minute']:,} {unit}/min"
                     + ("" if lim["active"] else "; INACTIVE: not enforced") + ")")
    return lines
