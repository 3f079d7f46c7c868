"""Public labelled toxicity sets, read into the items the offline judge's
measurement (``python -m bench.offline_evaluation --format``) scores. Neither set is shipped with
judgeflow; docs/offline-judge.md says where to get them.

- ``ethos``: ETHOS binary (Mollas et al., 2022), ``Ethos_Dataset_Binary.csv``:
  ``comment;isHate`` with ``isHate`` the share of annotators who judged the
  comment hate speech; toxic when at least half did.
- ``tweeteval``: a TweetEval task directory (Barbieri et al., 2020), e.g.
  ``datasets/offensive`` (OffensEval 2019): its test split,
  ``test_text.txt`` and ``test_labels.txt`` line by line, 1 = offensive.

alt-profanity-check, the offline judge's classifier, was trained on the
Davidson et al. tweets and the Jigsaw Wikipedia comments; neither of these
sets is drawn from them.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


def _item(number: int, source: str, text: str, toxic: bool) -> dict[str, Any]:
    return {"id": f"{source}-{number}", "task": "toxicity", "text": text.strip(),
            "label": "toxic" if toxic else "not_toxic", "split": "public", "kind": source}


def read_ethos(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter=";"))
    try:
        return [_item(n, "ethos", row["comment"], float(row["isHate"]) >= 0.5) for n, row in enumerate(rows, 1)]
    except (KeyError, TypeError, ValueError) as error:
        raise SystemExit(f"{path}: not ETHOS's binary CSV (comment;isHate): {error!r}") from error


def read_tweeteval(directory: str | Path) -> list[dict[str, Any]]:
    directory = Path(directory)
    texts = (directory / "test_text.txt").read_text(encoding="utf-8").splitlines()
    labels = (directory / "test_labels.txt").read_text(encoding="utf-8").split()
    if len(texts) != len(labels):
        raise SystemExit(f"{directory}: {len(texts)} texts but {len(labels)} labels")
    return [_item(n, "tweeteval", text, label == "1") for n, (text, label) in enumerate(zip(texts, labels), 1)]


READERS = {"ethos": read_ethos, "tweeteval": read_tweeteval}
