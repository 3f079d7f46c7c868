"""How well the configured judge agrees with human labels.

A labelled set is JSON Lines, one trace per line::

    {"id": "t1", "input": "...", "output": "...", "context": ["..."] | null,
     "labels": {"toxicity": true, "hallucination": false}}

``labels`` maps registered metrics (judgeflow/metrics/registry.py) to labels.

A line labelling a session metric (``level = "session"``) carries the conversation instead of one
trace: ``"turns": [{"input": "...", "output": "..."}, ...]`` in order (or ``"conversation"``, the
name `judgeflow labels sample` writes it under); the metric judges it as it judges a session's
(its ``ascore`` gets it as ``context``). A conversation labelled for a trace metric, a trace for a
session metric, and a label of a session rate (``M_session``: computed from the turns' results of
``M``, never judged) are refused, naming the line.

A label says whether a person judged the trace to *fail* the metric;
``1``/``0``, ``"yes"``/``"no"``, ``"fail"``/``"pass"`` are read too, and the
words each registered metric declares (its spec's ``label_words``).
A line may label one metric or several. The judge's decision is the metric's own:
a score above the threshold fails (below it, for a metric whose higher score is better). The figures treat "fails" as the positive
class: precision is the share of the judge's failures a person agrees with,
recall the share of the people's failures the judge finds, and Cohen's kappa
the agreement beyond what two raters with those base rates reach by chance.

This module is pure: judging the items is :mod:`judgeflow.tasks.calibration`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from judgeflow.errors import ConfigError
from judgeflow.metrics.registry import SESSION_RATE_SUFFIX, registered, spec_of

_WORDS = {"true": True, "1": True, "yes": True, "fail": True, "failed": True,
          "false": False, "0": False, "no": False, "pass": False, "passed": False}
SAMPLE_PATH = Path(__file__).parent.parent / "demo" / "labelled.jsonl"


@dataclass(frozen=True)
class LabelledItem:
    id: str
    input: str
    output: str
    context: Any  # a session line's: its conversation, as a session metric reads it
    labels: dict[str, bool]
    session: bool = False  # a conversation (``turns``), for session metrics


def label_words() -> dict[str, bool]:
    """Every word a label may be written as -> whether it means "fails"."""
    words = dict(_WORDS)
    for spec in registered().values():
        words.update(spec.label_words)
    return words


def _label(value: Any, *, where: str, words: dict[str, bool]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    fails, passes = ([w for w, fail in words.items() if fail is means] for means in (True, False))
    raise ConfigError(f"{where}: label {value!r} is not a label: fails is one of {'/'.join(fails)}, passes one "
                      f"of {'/'.join(passes)}")


def only_metrics(items: list[LabelledItem], metrics: list[str] | None) -> list[LabelledItem]:
    """The items with their labels of ``metrics`` only (None: all), those left with none dropped:
    calibrating one metric neither judges nor prices the others."""
    if metrics is None:
        return items
    kept = (replace(item, labels={m: v for m, v in item.labels.items() if m in metrics}) for item in items)
    return [item for item in kept if item.labels]


def _check_metrics(labels: dict, where: str, names: tuple[str, ...]) -> None:
    rates = sorted(m for m in labels if m.endswith(SESSION_RATE_SUFFIX) and m[:-len(SESSION_RATE_SUFFIX)] in names)
    if rates:
        raise ConfigError(f"{where}: {', '.join(rates)} is a session rate, computed from its turns' results of "
                          f"{rates[0][:-len(SESSION_RATE_SUFFIX)]} and never judged: there is no judge to calibrate; "
                          "label the turns for the trace metric instead")
    unknown = set(labels) - set(names)
    if unknown:
        raise ConfigError(f"{where}: unknown metric(s) in labels: {', '.join(sorted(unknown))}; "
                          f"registered: {', '.join(names)}")


def _turns(raw: dict, where: str) -> list[dict] | None:
    """A session line's conversation (``turns``, or ``conversation`` as `labels sample` writes it); None
    for a trace's line."""
    name = "turns" if raw.get("turns") is not None else "conversation"
    turns = raw.get(name)
    if turns is None:
        return None
    if (not isinstance(turns, list) or not turns
            or not all(isinstance(t, dict) and {"input", "output"} <= set(t) for t in turns)):
        raise ConfigError(f"{where}: '{name}' must be a non-empty list of turns, each "
                          '{"input": ..., "output": ...}')
    return [{"input": t["input"], "output": t["output"]} for t in turns]


def _check_levels(labels: dict, where: str, *, session: bool) -> None:
    specs = registered()
    wrong = sorted(m for m in labels if (specs[m].level == "session") != session)
    if wrong and session:
        raise ConfigError(f"{where}: a conversation ('turns') is judged by session metrics only; "
                          f"{', '.join(wrong)} judge{'s' if len(wrong) == 1 else ''} one trace")
    if wrong:
        raise ConfigError(f"{where}: {', '.join(wrong)} judge{'s' if len(wrong) == 1 else ''} a session: the line "
                          "needs its conversation as 'turns': [{\"input\": ..., \"output\": ...}, ...]")


def json_lines(path: str | Path, what: str) -> Iterator[tuple[int, str, Any]]:
    """Each non-blank line of a JSON Lines file (a labelled set, a labels file) as ``(line number,
    "path:line", value)``. An unreadable file, a byte that is not UTF-8 or a line that is not JSON is
    one error naming its line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read {what} {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        line = error.object[: error.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset "
                          f"{error.start}); save the {what} as UTF-8") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            yield number, where, json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{where}: not JSON ({error.msg})") from None
        except RecursionError:  # the decoder recurses once per nested list or object
            raise ConfigError(f"{where}: JSON nested too deeply to read") from None


def load_labelled(path: str | Path) -> list[LabelledItem]:
    """Read a labelled set; a malformed line is an error naming its line number."""
    items: list[LabelledItem] = []
    names, words = tuple(registered()), label_words()
    for number, where, raw in json_lines(path, "labelled set"):
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: each line needs an object with a string 'output' (or a session's 'turns')")
        labels = raw.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise ConfigError(f"{where}: 'labels' must map metrics ({', '.join(names)}) to labels")
        _check_metrics(labels, where, names)
        turns = _turns(raw, where)
        _check_levels(labels, where, session=turns is not None)
        if turns is None and not isinstance(raw.get("output"), str):
            raise ConfigError(f"{where}: each line needs an object with a string 'output' (or a session's 'turns')")
        items.append(LabelledItem(
            id=str(raw.get("id", number)),
            input="" if turns is not None else str(raw.get("input") or ""),
            output="" if turns is not None else raw["output"],
            context=turns if turns is not None else raw.get("context"),
            labels={m: _label(v, where=f"{where} ({m})", words=words) for m, v in labels.items() if v is not None},
            session=turns is not None,
        ))
    if not items:
        raise ConfigError(f"{path}: no labelled items")
    return items


@dataclass(frozen=True)
class Agreement:
    """Judge decision vs human label at one threshold ("fails" is positive)."""

    threshold: float
    tp: int
    fp: int
    tn: int
    fn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        if p is None or r is None or p + r == 0:
            return None if p is None or r is None else 0.0
        return 2 * p * r / (p + r)

    @property
    def accuracy(self) -> float | None:
        return (self.tp + self.tn) / self.n if self.n else None

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa; None when chance agreement is total (both raters gave one class only)."""
        n = self.n
        if not n:
            return None
        observed = (self.tp + self.tn) / n
        chance = ((self.tp + self.fp) * (self.tp + self.fn) + (self.fn + self.tn) * (self.fp + self.tn)) / (n * n)
        if chance == 1.0:
            return None
        return (observed - chance) / (1.0 - chance)


def agreement(scored: list[tuple[float, bool]], threshold: float) -> Agreement:
    """``scored``: (judge score, human says it fails) pairs."""
    tp = fp = tn = fn = 0
    for score, fails in scored:
        predicted = score > threshold  # the metric's rule: passed means score <= threshold
        if predicted and fails:
            tp += 1
        elif predicted:
            fp += 1
        elif fails:
            fn += 1
        else:
            tn += 1
    return Agreement(threshold, tp, fp, tn, fn)


def best_threshold(scored: list[tuple[float, bool]], configured: float) -> tuple[Agreement, float] | None:
    """The threshold whose decisions agree best with the labels (highest kappa,
    then F1, then nearest the configured one), and the end of the range of
    thresholds that make the same decisions: any value in [threshold, upto)."""
    if not scored:
        return None
    # decisions only change at a score: thresholds 0 and every distinct score cover them all
    candidates = sorted({0.0, 1.0, *(s for s, _ in scored)})

    def rank(a: Agreement):
        return (-1.0 if a.kappa is None else a.kappa, -1.0 if a.f1 is None else a.f1, -abs(a.threshold - configured))

    best = max((agreement(scored, t) for t in candidates), key=rank)
    above = [t for t in candidates if t > best.threshold]
    return best, (above[0] if above else 1.0)


@dataclass
class MetricReport:
    metric: str
    threshold: float
    labelled: int
    skipped: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    at_threshold: Agreement | None = None
    best: Agreement | None = None
    best_upto: float | None = None
    over_budget: int = 0  # not judged: the calibration's budget was spent
    # the metric passes at or above its threshold (a G-Eval metric): the figures are reckoned on 1 - score
    # and its thresholds told back on the metric's own scale
    higher_is_better: bool = False


def build_report(metric: str, threshold: float, scored: list[tuple[float, bool]], *, labelled: int,
                 skipped: int, failed: int, errors: list[str], over_budget: int = 0) -> MetricReport:
    report = MetricReport(metric, threshold, labelled, skipped, failed, errors[:5], over_budget=over_budget,
                          higher_is_better=spec_of(metric).higher_is_better)
    if not scored:
        return report
    if not report.higher_is_better:
        report.at_threshold = agreement(scored, threshold)
        report.best, report.best_upto = best_threshold(scored, threshold)
        return report
    # fails when score < threshold is fails when 1 - score > 1 - threshold: the same rule on the flipped scale
    flipped = [(1.0 - score, fails) for score, fails in scored]
    report.at_threshold = replace(agreement(flipped, 1.0 - threshold), threshold=threshold)
    best, upto = best_threshold(flipped, 1.0 - threshold)
    report.best, report.best_upto = replace(best, threshold=round(1.0 - best.threshold, 12)), round(1.0 - upto, 12)
    return report


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def table(reports: list[MetricReport]) -> list[dict[str, Any]]:
    """One row per metric (the Prefect table artifact)."""
    rows = []
    for r in reports:
        a = r.at_threshold
        rows.append({
            "metric": r.metric, "labelled": r.labelled, "judged": a.n if a else 0,
            "skipped": r.skipped, "failed": r.failed, "threshold": r.threshold,
            "kappa": _fmt(a.kappa if a else None), "precision": _fmt(a.precision if a else None),
            "recall": _fmt(a.recall if a else None), "f1": _fmt(a.f1 if a else None),
            "tp/fp/tn/fn": f"{a.tp}/{a.fp}/{a.tn}/{a.fn}" if a else "-",
            "best threshold": "-" if r.best is None else f"{r.best.threshold:g}",
            "best kappa": _fmt(r.best.kappa if r.best else None),
        })
    return rows


def render(reports: list[MetricReport], *, judge_model: str, source: str) -> str:
    """The report as markdown (printed by the CLI, published as an artifact)."""
    lines = [f"# judge calibration: {judge_model}", "", f"labelled set: {source}", ""]
    for r in reports:
        a = r.at_threshold
        lines.append(f"## {r.metric}")
        lines.append("")
        judged = a.n if a else 0
        lines.append(f"- items labelled: {r.labelled}; judged: {judged}; skipped by the judge: {r.skipped}; "
                     f"failed: {r.failed}" + (f"; {r.over_budget} not judged: the budget" if r.over_budget else ""))
        if a is None:
            lines.append("- no item was judged: no figures")
        else:
            rule = "score < threshold" if r.higher_is_better else "score > threshold"
            lines.append(f"- at the configured threshold {r.threshold:g} (fails when {rule}): "
                         f"kappa {_fmt(a.kappa)}, precision {_fmt(a.precision)}, recall {_fmt(a.recall)}, "
                         f"F1 {_fmt(a.f1)}, accuracy {_fmt(a.accuracy)} (tp {a.tp}, fp {a.fp}, tn {a.tn}, fn {a.fn})")
            b = r.best
            same = (f"any value above {r.best_upto:g} up to {b.threshold:g}" if r.higher_is_better else
                    f"any value from {b.threshold:g} up to {r.best_upto:g}")
            lines.append(f"- best agreement: threshold {b.threshold:g} ({same} decides the same): kappa {_fmt(b.kappa)}, precision {_fmt(b.precision)}, "
                         f"recall {_fmt(b.recall)}, F1 {_fmt(b.f1)} (tp {b.tp}, fp {b.fp}, tn {b.tn}, fn {b.fn})")
        for error in r.errors:
            lines.append(f"- error: {error}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
