"""`judgeflow results`: stored results as a list, newest first, filtered as the data is named."""

from __future__ import annotations

from typing import Optional

import typer

from judgeflow.cli.command import command_settings
from judgeflow.cli.errors import clear_errors
from judgeflow.cli.metric_option import chosen_metrics, metric_option

SEGMENT_HELP = "only results whose segment has this metadata value, e.g. app=chat; repeatable (all must match)"
SOURCE_HELP = "only results of this source (as `judgeflow status` names it) or kind, e.g. phoenix"


@clear_errors
def results(
    metric: Optional[list[str]] = metric_option("only this metric's results, repeatable (default: every one)"),
    failed: bool = typer.Option(False, "--failed", help="only results scored and not passing their metric"),
    errors: bool = typer.Option(False, "--errors", help="only results the judge could not score"),
    since: Optional[str] = typer.Option(None, help="only traces created at/after this (ISO time or e.g. 7d)"),
    until: Optional[str] = typer.Option(None, help="only traces created before this"),
    segment: Optional[list[str]] = typer.Option(None, "--segment", metavar="KEY=VALUE", help=SEGMENT_HELP),
    source: Optional[str] = typer.Option(None, "--source", help=SOURCE_HELP),
    limit: int = typer.Option(50, "--limit", min=1, help="print at most this many results"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list, one object per result"),
) -> None:
    """Stored results, newest trace first: trace id, metric, outcome, score and reason (or the error).
    Outcomes: pass, fail (scored, not passing), error (the judge could not score it: --errors),
    skipped. `judgeflow show TRACE_ID` prints one trace's results in full."""
    from judgeflow.cli.timeparse import parse_when
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.cli.json_output import dumps
    from judgeflow.db.result_listing import ResultFilter, list_results

    if failed and errors:
        raise typer.BadParameter("--failed and --errors select different results: give one")
    settings = command_settings()
    chosen = chosen_metrics(metric)
    wanted = ResultFilter(metrics=None if chosen is None else tuple(chosen),
                          kind="failed" if failed else "errors" if errors else "all",
                          since=parse_when(since), until=parse_when(until), segment=segment_values(segment),
                          source=source, limit=limit)
    engine = engine_for(settings)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        rows = list_results(conn, wanted)
    typer.echo(dumps(rows) if as_json else render_results(rows, limit=limit))


def segment_values(values: list[str] | None) -> dict[str, str] | None:
    """``--segment app=chat --segment tier=pro`` -> {"app": "chat", "tier": "pro"}."""
    if not values:
        return None
    pairs = {}
    for value in values:
        key, sep, wanted = value.partition("=")
        if not sep or not key.strip():
            from judgeflow.errors import ConfigError

            raise ConfigError(f"--segment {value!r}: write it as key=value, e.g. app=chat")
        pairs[key.strip()] = wanted.strip()
    return pairs


def outcome(row: dict) -> str:
    if row["status"] == "failed":
        return "error"
    if row["status"] == "skipped":
        return "skipped"
    return {True: "pass", False: "fail"}.get(row["passed"], "scored")


def render_results(rows: list[dict], *, limit: int, width: int | None = None) -> str:
    """One line per result, cut to the terminal's width (``show`` prints a result in full)."""
    from judgeflow.cli.layout import table_width

    if not rows:
        return "no result matches"
    width = width or table_width()
    lines = [_cut(f"{'trace created':<16}  {'metric':<14} {'outcome':<7} {'score':>5}  trace id / reason", width)]
    for r in rows:
        when = "-" if r["trace_created_at"] is None else f"{r['trace_created_at']:%Y-%m-%d %H:%M}"
        score = "-" if r["score"] is None else f"{r['score']:.2f}"
        why = r["error"] if r["status"] == "failed" else r["reason"]
        line = f"{when:<16}  {r['metric']:<14} {outcome(r):<7} {score:>5}  {r['trace_id']}"
        lines.append(_cut(line + (f"  {' '.join(str(why).split())}" if why else ""), width))
    if len(rows) == limit:
        lines.append(f"(the newest {limit}; --limit shows more)")
    return "\n".join(lines)


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"
