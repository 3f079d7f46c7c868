"""Measure the offline judge on a labelled set and print the figures.

    python -m bench.offline_evaluation tests/judge/data/offline_labelled.jsonl
    python -m bench.offline_evaluation tests/judge/data/offline_labelled.jsonl --sweep
    python -m bench.offline_evaluation tests/judge/data/offline_labelled.jsonl --errors
    python -m bench.offline_evaluation --format tweeteval PATH/TO/tweeteval/datasets/offensive

Each line of the file is one item:

- ``{"task": "toxicity", "text": ..., "label": "toxic" | "not_toxic", "split": ...}``
- ``{"task": "hallucination", "input": ..., "context": [...], "output": ...,
  "label": "faithful" | "unfaithful", "split": ...}``

Decisions measured (the positive class is "toxic" / "unfaithful"):

- ``toxicity (pipeline)``: the ``toxicity.opinions`` step on the text, then
  ``toxicity.verdicts`` on its opinions; toxic when any verdict is "yes".
- ``toxicity (verdict only)``: ``toxicity.verdicts`` on the whole text as one
  opinion (no opinion filter, so quotes of others are judged as if the author's).
- ``hallucination (any unsupported)``: unfaithful when the score is above 0.
- ``hallucination (metric @0.5)``: unfaithful when the score is above 0.5, the
  metric's default threshold (a one-of-two-sentences problem passes).

Every call goes through :class:`OfflineJudge` with the metric schemas and the
answers the built-in metrics declare, so the figures are those of the code path
the metrics use. ``--sweep`` reprints the
threshold sweeps the constants in :mod:`judgeflow.judge.offline.verdicts` and
:mod:`judgeflow.judge.offline.overlap` were chosen from (on the ``dev`` split).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

from judgeflow.judge.base import JudgeRequest
from judgeflow.judge.offline import overlap, verdicts
from judgeflow.judge.offline.judge import MODEL_NAME, OfflineJudge
from judgeflow.judge.offline.public_sets import READERS
from judgeflow.metrics.hallucination.schema import HallucinationJudgement
from judgeflow.metrics.toxicity.schema import Opinions, Verdicts

SPLITS = ("dev", "holdout", "fresh1", "fresh2")


def declared_answers() -> tuple[dict[str, str], frozenset[str]]:
    """What the registered metrics declare the offline judge answers (the metrics opened as an
    entry point opens them), as a judge is handed it when built."""
    from judgeflow.judge.config import offline_answers_of
    from judgeflow.metrics.registry import registered
    from judgeflow.run.metric_door import open_metrics

    open_metrics()
    return offline_answers_of(registered().values())


def offline_judge() -> OfflineJudge:
    """The offline judge with the answers the registered metrics declare."""
    answers, steps = declared_answers()
    return OfflineJudge(answers=answers, steps=steps)


@dataclass(frozen=True)
class Scores:
    n: int
    tp: int
    fp: int
    tn: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def accuracy(self) -> float:
        return (self.tp + self.tn) / self.n if self.n else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def line(self, name: str) -> str:
        return (
            f"{name:<34} n={self.n:<4} precision={self.precision:.3f} recall={self.recall:.3f} "
            f"accuracy={self.accuracy:.3f}  (tp={self.tp} fp={self.fp} tn={self.tn} fn={self.fn})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n, "precision": round(self.precision, 4), "recall": round(self.recall, 4),
            "accuracy": round(self.accuracy, 4), "tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn,
        }


def score(pairs: Iterable[tuple[bool, bool]]) -> Scores:
    """``pairs`` of (predicted positive, actually positive)."""
    tp = fp = tn = fn = 0
    for predicted, actual in pairs:
        if predicted and actual:
            tp += 1
        elif predicted:
            fp += 1
        elif actual:
            fn += 1
        else:
            tn += 1
    return Scores(tp + fp + tn + fn, tp, fp, tn, fn)


def load_items(path: str | Path) -> list[dict[str, Any]]:
    items = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path}:{number}: not JSON: {error}") from error
    return items


# --------------------------------------------------------------------------
# predictions through the judge
# --------------------------------------------------------------------------


def _ask(judge: OfflineJudge, step: str, schema: type, fields: dict[str, Any], context=None):
    reply = judge.complete(JudgeRequest(step=step, messages=[], response_format=schema, fields=fields))
    return schema.model_validate_json(reply.content, context=context)


def predict_toxic_pipeline(judge: OfflineJudge, text: str) -> tuple[bool, list[str], list[str]]:
    opinions = _ask(judge, "toxicity.opinions", Opinions, {"input": "", "output": text}).opinions
    if not opinions:
        return False, [], []
    verdicts = _ask(
        judge, "toxicity.verdicts", Verdicts, {"opinions": opinions}, {"expected": len(opinions)}
    ).verdicts
    return any(v.verdict == "yes" for v in verdicts), opinions, [v.reason for v in verdicts]


def predict_toxic_verdict_only(judge: OfflineJudge, text: str) -> tuple[bool, str]:
    (verdict,) = _ask(judge, "toxicity.verdicts", Verdicts, {"opinions": [text]}, {"expected": 1}).verdicts
    return verdict.verdict == "yes", verdict.reason


def hallucination_score(judge: OfflineJudge, item: dict[str, Any]) -> tuple[float, list[str]]:
    judgement = _ask(
        judge,
        "hallucination",
        HallucinationJudgement,
        {"input": item.get("input", ""), "output": item["output"], "context": item["context"], "examples": []},
    )
    return judgement.score, judgement.reason


@dataclass
class Row:
    item: dict[str, Any]
    actual: bool
    predicted: dict[str, bool]
    detail: str


def evaluate_rows(items: list[dict[str, Any]], judge: OfflineJudge | None = None) -> list[Row]:
    judge = judge or offline_judge()
    rows: list[Row] = []
    for item in items:
        if item["task"] == "toxicity":
            pipeline, opinions, reasons = predict_toxic_pipeline(judge, item["text"])
            alone, alone_reason = predict_toxic_verdict_only(judge, item["text"])
            detail = f"opinions={opinions} reasons={reasons} | verdict-only: {alone_reason}"
            rows.append(Row(item, item["label"] == "toxic",
                            {"toxicity (pipeline)": pipeline, "toxicity (verdict only)": alone}, detail))
        elif item["task"] == "hallucination":
            value, reasons = hallucination_score(judge, item)
            rows.append(Row(item, item["label"] == "unfaithful",
                            {"hallucination (any unsupported)": value > 0,
                             "hallucination (metric @0.5)": value > 0.5},
                            f"score={value} {reasons}"))
        else:
            raise SystemExit(f"unknown task {item.get('task')!r} in item {item.get('id')}")
    return rows


DECISIONS = (
    "toxicity (pipeline)",
    "toxicity (verdict only)",
    "hallucination (any unsupported)",
    "hallucination (metric @0.5)",
)


def figures(rows: list[Row], splits: Iterable[str] | None = None) -> dict[str, Scores]:
    """Scores per decision over the rows in ``splits`` (all rows when None)."""
    chosen = [r for r in rows if splits is None or r.item.get("split") in set(splits)]
    result = {}
    for decision in DECISIONS:
        pairs = [(r.predicted[decision], r.actual) for r in chosen if decision in r.predicted]
        if pairs:
            result[decision] = score(pairs)
    return result


def evaluate(path: str | Path) -> dict[str, dict[str, Scores]]:
    """{"all" | split: {decision: Scores}}; what the tests assert floors on."""
    rows = evaluate_rows(load_items(path))
    out = {"all": figures(rows)}
    for split in SPLITS:
        per = figures(rows, [split])
        if per:
            out[split] = per
    return out


# --------------------------------------------------------------------------
# calibration sweeps
# --------------------------------------------------------------------------


def _sweep(name: str, module: ModuleType, attr: str, values: list[float], run: Callable[[], Scores]) -> None:
    # the step modules read their constants at call time, so patching the
    # owning module is what the judge sees
    original = getattr(module, attr)
    short = module.__name__.rsplit(".", 1)[-1]
    print(f"\n{name}: sweep of {short}.{attr} (current {original}) on the dev split")
    try:
        for value in values:
            setattr(module, attr, value)
            s = run()
            print(f"  {attr}={value:<5} precision={s.precision:.3f} recall={s.recall:.3f} "
                  f"accuracy={s.accuracy:.3f} f1={s.f1:.3f}")
    finally:
        setattr(module, attr, original)


def sweep(items: list[dict[str, Any]]) -> None:
    judge = offline_judge()
    dev = [i for i in items if i.get("split") == "dev"]
    tox = [i for i in dev if i["task"] == "toxicity"]
    hal = [i for i in dev if i["task"] == "hallucination"]
    _sweep("toxicity (pipeline)", verdicts, "TOXIC_PROB_THRESHOLD", [0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9],
           lambda: score((predict_toxic_pipeline(judge, i["text"])[0], i["label"] == "toxic") for i in tox))
    _sweep("hallucination (any unsupported)", overlap, "COVERAGE_MIN", [0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0],
           lambda: score((hallucination_score(judge, i)[0] > 0, i["label"] == "unfaithful") for i in hal))
    _sweep("hallucination (any unsupported)", overlap, "MISSING_WORDS_ALLOWED", [0, 1, 2, 3],
           lambda: score((hallucination_score(judge, i)[0] > 0, i["label"] == "unfaithful") for i in hal))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.offline_evaluation", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="labelled JSONL, e.g. tests/judge/data/offline_labelled.jsonl, or a public "
                                     "set in the --format given")
    parser.add_argument("--format", choices=["jsonl", *READERS], default="jsonl",
                        help="ethos: ETHOS's binary CSV; tweeteval: a TweetEval task directory (its test split); "
                             "see judgeflow/judge/offline/public_sets.py")
    parser.add_argument("--sweep", action="store_true", help="also print the calibration sweeps (dev split)")
    parser.add_argument("--errors", action="store_true", help="also list the misclassified items")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    items = load_items(args.path) if args.format == "jsonl" else READERS[args.format](args.path)
    rows = evaluate_rows(items)
    groups = {"all": figures(rows)}
    for split in SPLITS:
        per = figures(rows, [split])
        if per:
            groups[split] = per
    if args.json:
        print(json.dumps({g: {d: s.as_dict() for d, s in per.items()} for g, per in groups.items()}, indent=2))
    else:
        print(f"offline judge {MODEL_NAME}: TOXIC_PROB_THRESHOLD={verdicts.TOXIC_PROB_THRESHOLD} "
              f"COVERAGE_MIN={overlap.COVERAGE_MIN}; {len(items)} items from {args.path}")
        for group, per in groups.items():
            print(f"\n[{group}]")
            for decision, s in per.items():
                print("  " + s.line(decision))
    if args.errors:
        print("\nmisclassified:")
        for row in rows:
            for decision, predicted in row.predicted.items():
                if decision in ("toxicity (pipeline)", "hallucination (any unsupported)") and predicted != row.actual:
                    kind = "FP" if predicted else "FN"
                    text = row.item.get("text") or row.item.get("output")
                    print(f"  {kind} {row.item['id']} [{row.item.get('split')}/{row.item.get('kind')}] {text}\n      {row.detail}")
    if args.sweep:
        sweep(items)
    return 0


if __name__ == "__main__":
    sys.exit(main())
