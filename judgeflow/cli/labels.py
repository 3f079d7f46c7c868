"""`judgeflow labels sample | import | plan`: people's labels in and out (issue 58; docs/labels.md).

The SQL is judgeflow/db/labels.py's, the maths judgeflow/calibration/label_sampling.py's, reading a
labels file judgeflow/calibration/label_import.py's; this module wires them to the settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from judgeflow.cli.errors import JudgeflowGroup, clear_errors

labels_app = typer.Typer(
    help="People's labels: draw a sample to label, import the labels, plan how many more.",
    no_args_is_help=True,
    rich_markup_mode=None,  # as the app's (judgeflow/cli/app.py)
    cls=JudgeflowGroup,
)

METRIC_HELP = "the metric to label (a registered name; `judgeflow metrics` lists them)"


def _metric(name: str) -> str:
    from judgeflow.metrics.registry import check_names

    return check_names([name.strip()])[0]


def _scope(settings, conn, metric: str, **filters):
    """The configured source's recorded name, the epoch in force for (source, metric), and the metric's
    scored results in it (judgeflow/db/labels.py ResultScope) with ``filters`` (since, segment)."""
    from judgeflow.db.epochs import current_epochs, in_epoch_sql
    from judgeflow.db.labels import ResultScope
    from judgeflow.sources.identity import result_source

    source = result_source(settings)
    epoch = current_epochs(conn, source).get(metric)
    in_epoch = in_epoch_sql({metric: epoch} if epoch else {}, [metric])
    return source, epoch, ResultScope(source, metric, in_epoch, **filters)


def _engine(settings):
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    engine = engine_for(settings)
    migrate.upgrade(engine)
    return engine


@labels_app.command("sample", short_help="Draw scored results for people to label (JSONL).")
@clear_errors
def sample(
    metric: str = typer.Option(..., "--metric", metavar="NAME", help=METRIC_HELP),
    n: int = typer.Option(..., "--n", min=1, help="how many results to draw"),
    since: Optional[str] = typer.Option(None, help="only traces created at/after this (ISO time or e.g. 7d)"),
    segment: Optional[list[str]] = typer.Option(
        None, "--segment", metavar="KEY=VALUE", help="only results with this segment value, e.g. app=chat; "
        "repeatable (all must match)"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE", help="write here (default: standard output)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="the draw's random seed (default: from the OS)"),
) -> None:
    """A probability sample of the metric's scored results in the judge epoch in force, stratified by
    the judge's verdict (half to each verdict, so the rarer one is oversampled), recorded with each
    result's inclusion probability. Writes JSONL to label: id, input, output, context (a session's:
    id, session_key, conversation) and labels {METRIC: null}, in a random order and with nothing of the judge's."""
    import random
    import secrets

    from judgeflow.calibration.label_sampling import FAIL, PASS, draw, inclusion_prob
    from judgeflow.cli.command import command_settings
    from judgeflow.cli.results import segment_values
    from judgeflow.cli.timeparse import parse_when
    from judgeflow.db.labels import record_draw, units_at, verdict_totals
    from judgeflow.errors import ConfigError

    settings = command_settings()
    metric, start, seg = _metric(metric), parse_when(since), segment_values(segment)
    seed = secrets.randbits(62) if seed is None else seed
    # one snapshot: the strata's sizes and the rows at the positions drawn from them agree
    with _engine(settings).connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        source, epoch, scope = _scope(settings, conn, metric, since=start, segment=seg)
        populations = {h: count for h, (count, _) in verdict_totals(conn, scope).items()}
        if not sum(populations.values()):
            raise ConfigError(f"no scored result of {metric} to draw from (of {source}"
                              f"{', in its judge epoch in force' if epoch else ''}, with these filters)")
        sizes, picked = draw(populations, n, random.Random(seed))
        at = units_at(conn, scope, {h: [i for s, i in picked if s == h] for h in populations})
        units = [(at[pick], pick[0], inclusion_prob(sizes[pick[0]], populations[pick[0]])) for pick in picked]
        draw_id = record_draw(
            conn, metric=metric, source=source, epoch_id=epoch.id if epoch else None, since=start, segment=seg,
            requested=n, seed=seed, strata={h: {"population": populations[h], "drawn": sizes[h]} for h in sizes},
            items=units)
        lines, missing = _lines(settings, conn, metric, [u for u, _, _ in units])
        # written before the transaction commits: a file that cannot be written records no draw
        _write(lines, out)
    where = f" to {out}" if out else ""
    typer.echo(f"draw {draw_id} of {metric} (seed {seed}): {len(units)} result(s){where}: "
               + ", ".join(f"{h} {sizes[h]} of {populations[h]}" for h in (FAIL, PASS))
               + (f"; {missing} not found in the source (input/output or conversation null)" if missing else ""),
               err=True)


def _lines(settings, conn, metric: str, units) -> tuple[list[dict], int]:
    """The JSONL lines: each result read back from the source; a session's as its key and conversation
    (the turns session judging reads, judgeflow/db/sessions.py conversations)."""
    from judgeflow.db.engine import source_engine
    from judgeflow.db.labels import session_keys
    from judgeflow.db.sessions import conversations
    from judgeflow.sources.session_id import is_session_id
    from judgeflow.sources.trace_source import TraceKey, read_bodies, trace_source

    source, engine = trace_source(settings), source_engine(settings)
    keys = [TraceKey(u.trace_id, u.trace_created_at) for u in units
            if not is_session_id(u.trace_id) and u.trace_created_at is not None]
    bodies = read_bodies(source, engine, keys).bodies if keys else {}
    session_ids = [u.trace_id for u in units if is_session_id(u.trace_id)]
    sessions = session_keys(conn, session_ids)
    turns = conversations(conn, source, engine, session_ids) if session_ids else {}
    lines, missing = [], 0
    for u in units:
        if is_session_id(u.trace_id):
            conversation = turns.get(u.trace_id) or None
            missing += conversation is None
            lines.append({"id": u.trace_id, "session_key": sessions.get(u.trace_id), "conversation": conversation,
                          "labels": {metric: None}})
            continue
        body = bodies.get(u.trace_id)
        missing += body is None
        lines.append({"id": u.trace_id, "input": body and body.input, "output": body and body.output,
                      "context": body and body.context, "labels": {metric: None}})
    return lines, missing


def _write(lines: list[dict], out: Path | None) -> None:
    text = "".join(json.dumps(line, ensure_ascii=False, default=str) + "\n" for line in lines)
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        from judgeflow.errors import ConfigError

        raise ConfigError(f"cannot write {out}: {error.strerror or error}") from None


@labels_app.command("import", short_help="Store people's labels from a JSONL file.")
@clear_errors
def import_labels(
    path: Path = typer.Argument(..., metavar="FILE", help="JSONL: each line's id and labels {METRIC: true/false}"),
    labeller: str = typer.Option("", "--labeller", metavar="NAME", help="who labelled (default: nobody named)"),
) -> None:
    """Stores each line's labels (true = fails the metric; null = not labelled yet, skipped). A label of
    a drawn result belongs to its latest draw; one of a result in no draw is stored as hand-picked and not
    used for correction. The whole file is checked first: a problem stores nothing. Importing again
    replaces the labeller's earlier labels."""
    from judgeflow.calibration.label_import import plan_import, read_label_lines
    from judgeflow.cli.command import command_settings
    from judgeflow.db.labels import standings, store_labels
    from judgeflow.sources.identity import result_source

    settings = command_settings()
    lines = read_label_lines(path)
    source = result_source(settings)
    with _engine(settings).begin() as conn:
        planned = plan_import(lines, lambda ids: standings(conn, source, ids), labeller=labeller)
        store_labels(conn, planned.rows)
    typer.echo(planned.summary(str(path)))


@labels_app.command("plan", short_help="How many more labels reach a target interval.")
@clear_errors
def plan(
    metric: str = typer.Option(..., "--metric", metavar="NAME", help=METRIC_HELP),
    half_width: float = typer.Option(..., "--half-width", min=0.0001, max=0.5,
                                     help="the corrected rate's interval half-width to reach, e.g. 0.02"),
    confidence: float = typer.Option(0.95, "--confidence", min=0.5, max=0.999, help="the interval's confidence"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
) -> None:
    """Labels to add, per verdict, for the corrected rate's interval to reach the half-width, from the
    disagreement of the labels drawn so far in the judge epoch in force (a Beta(1,1) prior: 0.5 with no
    labels), allocated where they shrink the interval most (Neyman)."""
    from judgeflow.calibration.label_sampling import PRIOR, plan as plan_labels
    from judgeflow.cli.command import command_settings
    from judgeflow.db.labels import labelled_sample, verdict_totals

    settings = command_settings()
    metric = _metric(metric)
    with _engine(settings).connect() as conn:
        source, epoch, scope = _scope(settings, conn, metric)
        weights = {h: weight for h, (_, weight) in verdict_totals(conn, scope).items()}
        draws = labelled_sample(conn, source, metric, epoch.id if epoch else None)
    if not sum(weights.values()):
        from judgeflow.errors import ConfigError

        raise ConfigError(f"no scored result of {metric} (of {source}) in its judge epoch in force: no rate to "
                          "correct yet")
    labelled = {h: (sum(1 for d in draws for i in d.items if i.stratum == h),
                    sum(1 for d in draws for i in d.items if i.stratum == h and i.label)) for h in weights}
    result = plan_labels(weights, labelled, half_width_target=half_width, confidence=confidence)
    if as_json:
        from judgeflow.cli.json_output import dumps

        typer.echo(dumps({"metric": metric, **result.as_json()}))
        return
    now = "-" if result.current_half_width is None else f"±{result.current_half_width:.4f}"
    typer.echo(f"{metric}: {result.more} more label(s) for ±{half_width:g} at {confidence:.0%} (now {now})")
    for s in result.strata:
        typer.echo(f"  judged {s.name}: {s.more} more (share {s.weight:.1%}; {s.labels} labelled, people say "
                   f"{s.fails} fail; p={s.p:.3f})")
    typer.echo(f"prior: {PRIOR}")
