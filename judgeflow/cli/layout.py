"""Text laid out to the terminal's width, so nothing needs scrolling sideways: a table of figures stacked
when its columns do not fit, and, on a terminal, long lines wrapped at a space. Piped (grep, a CI log, a
test's runner) lines stay whole, as gh leaves them, whatever COLUMNS says; a table fits COLUMNS there, else
80 columns."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap

from judgeflow.terminal_text import is_terminal

TABLE_WIDTH = 80  # a table's width when the output has none (piped, no COLUMNS)


def _columns() -> int | None:
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def _on_terminal() -> bool:
    # the command's stdout is wrapped (judgeflow/terminal_text.py) and says it is no terminal: ask beneath it
    return is_terminal(sys.stdout)


def table_width() -> int:
    """COLUMNS, else the terminal's width, else 80."""
    if _columns():
        return _columns()
    return shutil.get_terminal_size((TABLE_WIDTH, 24)).columns if _on_terminal() else TABLE_WIDTH


def line_width() -> int | None:
    """The width lines wrap at: the terminal's (COLUMNS, else its size); None when stdout is not one."""
    return table_width() if _on_terminal() else None


def figure_table(rows: dict[str, dict], columns: list[str], width: int, *, corner: str = "metric") -> list[str]:
    """``rows`` (a name: its figures) under ``columns``: one line per row when every column fits in
    ``width``; else one line per figure with the rows across, in as many blocks as the width needs."""
    heads = [c.replace("_", " ") for c in columns]
    names = list(rows)

    def cell(name: str, column: str) -> str:
        return str(rows[name].get(column, 0))

    first = max([len(corner), *map(len, names)])
    widths = [max([len(h), *(len(cell(n, c)) for n in names)]) for h, c in zip(heads, columns)]
    if first + sum(w + 2 for w in widths) <= width:
        lines = [corner.ljust(first) + "".join(f"  {h:>{w}}" for h, w in zip(heads, widths))]
        lines += [n.ljust(first) + "".join(f"  {cell(n, c):>{w}}" for c, w in zip(columns, widths)) for n in names]
        return lines
    first = max([len(corner), *map(len, heads)])
    across = {n: max([len(n), *(len(cell(n, c)) for c in columns)]) for n in names}
    lines: list[str] = []
    block: list[str] = []
    for name in [*names, None]:  # None: the last block is written out
        if name is not None and (not block or first + sum(across[b] + 2 for b in [*block, name]) <= width):
            block.append(name)
            continue
        if lines:
            lines.append("")
        lines.append(corner.ljust(first) + "".join(f"  {b:>{across[b]}}" for b in block))
        lines += [h.ljust(first) + "".join(f"  {cell(b, c):>{across[b]}}" for b in block)
                  for h, c in zip(heads, columns)]
        block = [name]
    return lines


def wrapped(lines: list[str], width: int | None) -> list[str]:
    """Each line within ``width``, broken at spaces, its continuation indented two more than its start
    (a word longer than the width, a URL say, is kept whole); None: as they are."""
    out: list[str] = []
    for line in lines:
        if width is None or len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                             break_on_hyphens=False)
    return out
