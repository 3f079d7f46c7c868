"""judgeflow's benchmark: ``.venv/bin/python -m bench.run [--case ...]`` (or
``./scripts/bench``). Not part of the test suite.

Starts its own PostgreSQL (a private cluster in a temporary directory), one
Prefect API server (its start-up is reported apart, never measured), and per
case a local OpenAI-compatible judge server as a separate process with the
configured latency, jitter and fault rates; loads synthetic traces with COPY,
runs the real ``judgeflow score`` as subprocesses, and prints the tables
(Markdown). The README's "Benchmark" section has the figures and how to read them.

Cases (``--case``, repeatable; default: all):

* ``instant``   judge answers at once: judgeflow's own overhead, 1 process
* ``instant-jp`` the same, one run with ``--judge-processes 2`` (judge calls in two workers)
* ``instant2``  the same with two scoring processes at once (one per core)
* ``latency``   200 ms +- 50 ms judge, 32 calls in flight
* ``custom``    your own: ``--traces --latency --jitter --fault 429=0.05 --concurrency
                --judge-processes``
* ``peer``      side by side with deepeval evaluate() (ToxicityMetric + HallucinationMetric) on
                the same traces, 200 ms judge and 64 calls in flight; judgeflow with its defaults
                (needs the ``peer`` extra, which ``./scripts/bench --case peer`` installs; not in the default set)
* ``runtime``   issue 28's figures: ``judgeflow score`` as a fresh process on 2,000 traces (``--traces``),
                200 ms judge, 64 in flight (``--peer-concurrency``), a Prefect server running: whole
                process vs ideal, calls and prompt tokens per trace, peak memory of its process tree,
                processes left; and ``judgeflow score`` with nothing to score vs ``import prefect``
                (not in the default set)
* ``ceiling``   the same judge calls straight through judgeflow's judge, nothing else running:
                what litellm's CPU per call allows on this machine (not in the default set)
* ``backlog``   1k / 10k / 100k traces in the source: claim time per batch, plans, memory
* ``scaleout``  1, 2, 4 processes at once on one backlog, 200 ms judge
* ``account-limit`` 1, 2, 4 processes under one ``JUDGEFLOW_JUDGE_RPM`` (``--rpm``, default 600; ``--traces``,
                default 460: about 1,500 calls), the judge server refusing past the same limit: requests per
                minute and 429s at the judge, the night against calls / RPM (not in the default set;
                ``--prefect-db postgres`` puts the Prefect server on PostgreSQL, as docker/compose.yaml does)

``--profile`` records the scoring process of the throughput cases with py-spy
(``--gil``: where its one core of Python time goes) and prints a summary.
``--quick`` shrinks every case for a smoke run.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.harness import Stack

ALL = ("instant", "instant-jp", "instant2", "latency", "backlog", "scaleout")


def markdown_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
    return "\n".join(lines)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def median_rows(results) -> list[dict[str, str]]:
    """Per case (repetition suffix dropped), the median of every number in each
    cell, component by component ("8 (19.7)", "108.8/7.4/1.8/12.6")."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in results:
        row = r.row()
        groups.setdefault((r.case.name.rsplit(" #", 1)[0], row["fan-out"]), []).append(row)
    out = []
    for (name, fanout), rows in groups.items():
        merged = {"case": name, "fan-out": fanout}
        for key in rows[0]:
            if key in ("case", "fan-out"):
                continue
            template = _NUMBER.sub("{}", rows[0][key])
            numbers = [_NUMBER.findall(row[key]) for row in rows]
            if any(_NUMBER.sub("{}", row[key]) != template for row in rows) or not numbers[0]:
                merged[key] = rows[0][key]
                continue
            medians = []
            for i, first in enumerate(numbers[0]):
                m = statistics.median(float(n[i]) for n in numbers)
                decimals = len(first.split(".")[1]) if "." in first else 0
                medians.append(f"{m:.{decimals}f}")
            merged[key] = template.format(*medians)
        merged["runs"] = str(len(rows))
        out.append(merged)
    return out


def machine(stack: Stack | None = None) -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    pg = "?"
    if stack is not None:
        import psycopg

        with psycopg.connect(stack.admin_conninfo()) as conn:
            pg = conn.execute("SHOW server_version").fetchone()[0]
    from importlib.metadata import version

    return (
        f"{datetime.now(timezone.utc):%Y-%m-%d}, {os.cpu_count()} cores, {platform.machine()}, {cpu}, "
        f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB RAM; "
        f"Linux {platform.release()}; Python {platform.python_version()}; PostgreSQL {pg}; "
        f"prefect {version('prefect')}, litellm {version('litellm')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append",
                        choices=[*ALL, "custom", "peer", "ceiling", "runtime", "account-limit"],
                        help="default: all but custom, peer and ceiling")
    parser.add_argument("--peer-traces", type=int, default=400, help="peer: traces (default %(default)s)")
    parser.add_argument("--peer-concurrency", type=int, default=64, help="peer: calls in flight (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="py-spy the scoring process (throughput cases)")
    parser.add_argument("--traces", type=int, help="traces per throughput case (default 3000; quick 300)")
    parser.add_argument("--latency", type=float, default=0.2, help="custom: judge latency mean, s")
    parser.add_argument("--jitter", type=float, default=0.05, help="custom: judge latency jitter (+-), s")
    parser.add_argument("--fault", action="append", default=[], metavar="KIND=RATE",
                        help="custom: injected faults (429, 500, garbage, stall), repeatable")
    parser.add_argument("--concurrency", type=int, default=32, help="custom: calls in flight per process")
    parser.add_argument("--processes", type=int, default=1, help="custom: scoring processes at once")
    parser.add_argument("--judge-processes", type=int, default=1,
                        help="custom: judgeflow score --judge-processes")
    parser.add_argument("--judge-model", default="openai/gpt-4o-mini",
                        help="model name the local judge answers as; a priced name makes litellm price "
                             "the calls as it would in production (default: %(default)s)")
    parser.add_argument("--rpm", type=int, default=600, help="account-limit: JUDGEFLOW_JUDGE_RPM and the judge's limit")
    parser.add_argument("--prefect-db", choices=["sqlite", "postgres"], default="sqlite",
                        help="the Prefect server's database (postgres: as docker/compose.yaml deploys it)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each throughput case this many times (the machine's speed varies)")
    parser.add_argument("--out", type=Path, help="keep logs, plans and profiles here (default: a temp dir)")
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)

    from bench.backlog import run_backlog
    from bench.scaleout import run_scaleout
    from bench.throughput import Case, run_case

    cases = args.case or list(ALL)
    n = args.traces or (300 if args.quick else 3000)
    out = args.out or Path(tempfile.mkdtemp(prefix="judgeflow-bench-out-"))
    out.mkdir(parents=True, exist_ok=True)
    report: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        report.append(text)

    t0 = time.perf_counter()
    with Stack(prefect_on_postgres=args.prefect_db == "postgres") as stack:
        say(f"# judgeflow benchmark\n\nMachine: {machine(stack)}\n")
        say(f"Helpers started in {stack.startup_s:.1f} s (PostgreSQL, Prefect API server; not measured). "
            f"Logs, plans and profiles: {out}\n")
        model = args.judge_model
        throughput = []
        if "instant" in cases:
            throughput.append(Case("instant judge, 1 process", n, concurrency=8, judge_model=model))
        if "instant-jp" in cases:
            throughput.append(Case("instant judge, 1 process", n, concurrency=8, judge_model=model,
                                   judge_processes=2))
        if "instant2" in cases:
            throughput.append(Case("instant judge, 2 processes", n, concurrency=8, processes=2, judge_model=model))
        if "latency" in cases:
            throughput.append(Case("200 ms judge, 32 in flight", n, latency_s=0.2, jitter_s=0.05,
                                   concurrency=32, judge_model=model))
        if "custom" in cases:
            faults = dict((k, float(v)) for k, _, v in (f.partition("=") for f in args.fault))
            throughput.append(Case(f"custom {args.latency * 1000:.0f} ms, {args.concurrency} in flight"
                                   + (f", faults {faults}" if faults else ""), n,
                                   latency_s=args.latency, jitter_s=args.jitter, concurrency=args.concurrency,
                                   processes=args.processes, faults=faults, judge_model=model,
                                   judge_processes=args.judge_processes))
        results = []
        for repetition in range(args.repeat):
            for case in throughput:
                if args.repeat > 1:
                    case = dataclasses.replace(case, name=f"{case.name} #{repetition + 1}")
                results.append(run_case(stack, case, out=out))
        if results:
            say("## Throughput\n")
            say(markdown_table([r.row() for r in results]))
            for r in results:
                say(f"\n{r.case.name}: rows {r.rows}; first-step judge calls per (trace, metric): {r.pair_calls}")
            if args.repeat > 1:
                say("\nMedian over the repetitions:\n")
                say(markdown_table(median_rows(results)))
            if args.profile:
                for case in throughput:
                    if case.processes == 1:
                        profiled = run_case(stack, case, out=out, profile=True, quiet=True)
                        say(f"\n### Profile: {case.name} (py-spy --gil; this run's own figures are skewed by the "
                            f"profiler)\n\n{profiled.profile}")
        if "peer" in cases:
            from bench.peer import peer_rows, run_peer

            for repetition in range(args.repeat):
                ours, peer = run_peer(stack, traces=args.peer_traces, concurrency=args.peer_concurrency, out=out)
                say(f"\n## Side by side with deepeval evaluate() (run {repetition + 1})\n")
                say(markdown_table(peer_rows(ours, peer)))
                for result in ours:
                    say(f"\njudgeflow is {peer.wall_s / result.wall_s:.1f}x "
                        f"faster over the whole process ({peer.wall_s:.1f} s / {result.wall_s:.1f} s); per judge "
                        f"call {(peer.wall_s / max(peer.calls, 1)) / (result.wall_s / max(result.calls, 1)):.1f}x. "
                        f"judgeflow rows: {result.rows}; CPU s: {result.cpu}")
        if "runtime" in cases:
            from bench.runtime import nothing_to_score, run_runtime

            runs = [run_runtime(stack, traces=args.traces or 2000, concurrency=args.peer_concurrency, out=out)
                    for _ in range(args.repeat)]
            say(f"\n## judgeflow score as a fresh process ({args.peer_concurrency} calls in flight, 200 ms judge, "
                "Prefect server running; deepeval evaluate() measured at 627.9 s on this setup before)\n")
            say(markdown_table([r.row() for r in runs]))
            for r in runs:
                say(f"\nrows: {r.rows}")
            say("\n### Nothing to score\n")
            say(markdown_table(nothing_to_score(stack)))
        if "account-limit" in cases:
            from bench.account_limit import run_account_limit

            limited = run_account_limit(stack, out=out, rpm=args.rpm, traces=args.traces or 460)
            say(f"\n## One account limit: {args.rpm} requests per minute, the judge refusing past it "
                f"(the Prefect server on {args.prefect_db})\n")
            say(markdown_table([r.row() for r in limited]))
        if "ceiling" in cases:
            from bench.ceiling import measure
            from judgeflow.judge.factory import judge_process_count
            from judgeflow.config.settings import Settings

            default = judge_process_count(Settings(_env_file=None))
            ceilings = [measure(n, concurrency=args.peer_concurrency, calls=round(args.peer_traces * 3.5))
                        for n in sorted({1, default}) for _ in range(args.repeat)]
            say(f"\n## What litellm alone allows ({args.peer_concurrency} calls in flight, 200 ms judge, "
                "no Prefect, no database, workers warm)\n")
            say(markdown_table([c.row() for c in ceilings]))
        if "backlog" in cases:
            sizes = [1000, 10000] if args.quick else [1000, 10000, 100000]
            backlog = run_backlog(stack, sizes, out=out, limit=200 if args.quick else 500)
            say("\n## Backlog\n")
            say(markdown_table([b.row() for b in backlog]))
            for b in backlog:
                say(f"\n{b.shape} {b.size:,}: {b.index_scan}")
            middle = next((b for b in reversed(backlog) if b.shape == "pending"), None)
            if middle:
                say(f"\nClaim query at the middle of the {middle.size:,}-trace pending backlog "
                    f"(EXPLAIN (ANALYZE, BUFFERS)):\n\n```\n{middle.plan}\n```")
        if "scaleout" in cases:
            scale = run_scaleout(stack, out=out, traces=200 if args.quick else 1600,
                                 counts=(1, 2) if args.quick else (1, 2, 4))
            say("\n## Scale-out (200 ms judge, 8 in flight per process, batch 20)\n")
            say(markdown_table([s.row() for s in scale]))
    say(f"\nTotal benchmark time {time.perf_counter() - t0:.0f} s.")
    if args.markdown:
        args.markdown.write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    from judgeflow.run.metric_door import open_metrics

    open_metrics()  # the script is its own entry point: its metrics open once, before any settings
    sys.exit(main())
