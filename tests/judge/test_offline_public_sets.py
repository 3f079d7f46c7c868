"""Reading public labelled toxicity sets for the offline judge's measurement
(judgeflow/judge/offline/public_sets.py, `python -m bench.offline_evaluation --format`)."""

from __future__ import annotations

import json

import pytest

from bench import offline_evaluation as evaluation
from judgeflow.judge.offline.public_sets import read_ethos, read_tweeteval


def test_ethos_binary_csv(tmp_path):
    path = tmp_path / "Ethos_Dataset_Binary.csv"
    path.write_text("comment;isHate\nYou are a worthless idiot;1.0\nNice weather today;0.0\n"
                    "borderline;0.5\nmild;0.333333\n", encoding="utf-8")
    items = read_ethos(path)
    assert [(i["text"], i["label"]) for i in items] == [
        ("You are a worthless idiot", "toxic"), ("Nice weather today", "not_toxic"),
        ("borderline", "toxic"), ("mild", "not_toxic")]
    assert {i["task"] for i in items} == {"toxicity"} and {i["split"] for i in items} == {"public"}


def test_tweeteval_test_split(tmp_path):
    (tmp_path / "test_text.txt").write_text("@user you are a moron \nlovely day \n", encoding="utf-8")
    (tmp_path / "test_labels.txt").write_text("1\n0\n", encoding="utf-8")
    items = read_tweeteval(tmp_path)
    assert [(i["text"], i["label"]) for i in items] == [("@user you are a moron", "toxic"),
                                                         ("lovely day", "not_toxic")]
    (tmp_path / "test_labels.txt").write_text("1\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="2 texts but 1 labels"):
        read_tweeteval(tmp_path)


def test_the_measurement_runs_on_a_public_set(tmp_path, capsys):
    path = tmp_path / "ethos.csv"
    path.write_text("comment;isHate\nYou are a stupid idiot and a moron!;1.0\n"
                    "The library opens at nine on Mondays.;0.0\n", encoding="utf-8")
    assert evaluation.main(["--format", "ethos", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pipeline = out["all"]["toxicity (pipeline)"]
    assert pipeline["n"] == 2 and pipeline["tp"] == 1 and pipeline["tn"] == 1
