"""Reading a file of labels for `judgeflow labels import`: pure, the database's answers handed in.

Each line's ``id`` and ``labels`` are read, anything else ignored (a line of the JSONL `labels sample`
wrote, or just ``{"id": "t1", "labels": {"METRIC": true}}``). A label is true/false in any word
calibration reads (judgeflow/calibration/labelled.py); null is not labelled yet: skipped, counted.
The whole file is checked before anything is stored; the first problem is one :class:`ConfigError`
naming the file and line: not JSON, no id or labels, an unknown metric, a label that is not
true/false, an id never scored for the metric, an id drawn only for other metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from judgeflow.calibration.labelled import _label, json_lines, label_words
from judgeflow.db.labels import Standing
from judgeflow.errors import ConfigError
from judgeflow.metrics.registry import registered

HAND_PICKED = "stored, not used for correction: not from a probability sample"


@dataclass(frozen=True)
class LabelLine:
    where: str  # file:line
    id: str
    labels: dict[str, bool | None]  # None: not labelled yet


def read_label_lines(path: str | Path) -> list[LabelLine]:
    """Every line's id and labels, each label read as true/false/None."""
    names, words = set(registered()), label_words()
    lines = []
    for _, where, raw in json_lines(path, "labels file"):
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), (str, int)) or isinstance(raw.get("id"), bool):
            raise ConfigError(f"{where}: each line needs an object with an 'id'")
        labels = raw.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise ConfigError(f"{where}: 'labels' must map metrics to true/false (null: not labelled yet)")
        unknown = sorted(set(labels) - names)
        if unknown:
            raise ConfigError(f"{where}: unknown metric(s) in labels: {', '.join(unknown)}; registered: "
                              f"{', '.join(sorted(names))}")
        lines.append(LabelLine(where, str(raw["id"]), {
            m: None if v is None else _label(v, where=f"{where} ({m})", words=words) for m, v in labels.items()}))
    return lines


@dataclass
class ImportPlan:
    """The labels to store (``rows`` for judgeflow/db/labels.py store_labels) and what the summary says."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    by_draw: int = 0
    hand_picked: int = 0
    skipped: int = 0

    def summary(self, path: str) -> str:
        hand = f", {self.hand_picked} hand-picked ({HAND_PICKED})" if self.hand_picked else ""
        return (f"{path}: stored {len(self.rows)} label(s): {self.by_draw} from a draw{hand}; "
                f"skipped {self.skipped} null (not labelled yet)")


def plan_import(lines: list[LabelLine], standings: Callable[[list[str]], dict[str, Standing]], *,
                labeller: str) -> ImportPlan:
    """Check every label against what the database knows of its id; the labels to store (a later line
    for the same id and metric wins), or the first problem as a :class:`ConfigError`."""
    known = standings(sorted({line.id for line in lines}))
    chosen: dict[tuple[str, str], dict[str, Any]] = {}
    out = ImportPlan()
    for line in lines:
        standing = known[line.id]
        for metric, label in line.labels.items():
            if label is None:
                out.skipped += 1
                continue
            if metric not in standing.scored:
                raise ConfigError(f"{line.where}: id {line.id!r} was never scored for {metric} (of the configured "
                                  "source): nothing to label")
            draw_id = standing.latest_draw.get(metric)
            if draw_id is None and standing.latest_draw:
                asked = ", ".join(sorted(standing.latest_draw))
                raise ConfigError(f"{line.where}: id {line.id!r} was drawn to label {asked}, not {metric}")
            chosen[(line.id, metric)] = {"trace_id": line.id, "metric": metric, "label": label,
                                         "labeller": labeller, "draw_id": draw_id}
    out.rows = list(chosen.values())
    out.by_draw = sum(1 for r in out.rows if r["draw_id"] is not None)
    out.hand_picked = len(out.rows) - out.by_draw
    return out
