"""judgeflow/cli/layout.py: a table of figures and long lines kept within the terminal's width."""

from __future__ import annotations

from judgeflow.cli.layout import figure_table, wrapped

FIGURES = ["scored", "passed", "skipped", "failed", "given_up", "pending", "in_progress", "stranded", "superseded"]


def _rows(names: list[str]) -> dict[str, dict]:
    return {n: {f: 10 ** i + k for i, f in enumerate(FIGURES)} for k, n in enumerate(names)}


def test_a_table_that_fits_is_a_metric_a_line():
    lines = figure_table(_rows(["toxicity"]), FIGURES, 200)
    assert lines[0].split() == ["metric", "scored", "passed", "skipped", "failed", "given", "up", "pending", "in",
                                "progress", "stranded", "superseded"]
    assert lines[1].split() == ["toxicity", *(str(10 ** i) for i in range(len(FIGURES)))]


def test_a_wide_table_is_stacked_in_blocks_within_the_width_and_loses_no_figure():
    names = ["toxicity", "hallucination", "helpfulness", "a_metric_with_a_long_name", "conciseness", "tone"]
    rows = _rows(names)
    for width in (40, 60, 80):
        lines = figure_table(rows, FIGURES, width)
        assert max(map(len, lines)) <= width, (width, max(lines, key=len))
        blocks = "\n".join(lines).split("\n\n")
        assert len(blocks) > 1
        shown = {}
        for block in blocks:
            head, *body = block.splitlines()
            across = head.split()[1:]
            for line in body:
                figure, *values = line.rsplit(None, len(across))
                for name, value in zip(across, values):
                    shown[(name, figure.replace(" ", "_"))] = int(value)
        assert shown == {(n, f): rows[n][f] for n in names for f in FIGURES}


def test_long_lines_wrap_at_spaces_with_a_hanging_indent():
    line = "pending: in traces created since 2026-11-28T00:00:00+00:00, and failed pairs; " * 3
    out = wrapped(["short", line.strip(), "  indented " + "word " * 30], 80)
    assert out[0] == "short" and max(map(len, out)) <= 80
    assert all(o.startswith("  ") for o in out[2:] if not o.startswith("  indented"))
    assert " ".join(" ".join(out).split()) == " ".join(f"short {line} indented {'word ' * 30}".split())


def test_lines_wrap_only_on_a_terminal_and_a_table_fits_columns_else_80(monkeypatch):
    from judgeflow.cli.layout import line_width, table_width

    monkeypatch.setenv("COLUMNS", "72")
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert (table_width(), line_width()) == (72, None)  # piped: lines stay whole for grep, whatever COLUMNS says
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert (table_width(), line_width()) == (72, 72)
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert (table_width(), line_width()) == (80, None)
    assert wrapped(["x " * 100], None) == ["x " * 100]


def test_metrics_on_an_80_column_terminal_wraps_every_line_and_keeps_each_metrics_facts(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "JUDGEFLOW_HOME": str(tmp_path),
           "JUDGEFLOW_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"}  # never read: no prepared steps
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "judgeflow", "metrics"], env=env, cwd=tmp_path,
                                stdin=follower, stdout=follower, stderr=follower)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=60)
    finally:
        os.close(leader)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    assert proc.returncode == 0, text
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    starts = [line.split()[0] for line in lines if line and not line.startswith(" ")]
    assert starts == ["toxicity", "hallucination"], text
    assert text.count("judged by ") == 2 and "toxicity_rate max 5%" in " ".join(text.split()), text
