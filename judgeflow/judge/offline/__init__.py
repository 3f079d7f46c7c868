"""The offline judge: answers the metric steps without a network or an API key.

Selected with ``JUDGEFLOW_JUDGE_MODEL=offline``. It never reads the prompt: it
dispatches on ``request.step`` and works from ``request.fields`` (the same
normalised, truncated values the prompt was built from), so a prompt injection
in a trace cannot steer it. What it does per step:

``toxicity.opinions``
    Splits the output into sentences (regex splitter that keeps abbreviations,
    initials and decimals together) and keeps the *evaluative* ones: sentences
    with opinion or sentiment markers (first-person judgement, evaluative
    adjectives and adverbs, exclamations, should/must, rhetorical questions
    aimed at "you", a rubric pattern) or a
    profanity-classifier probability above :data:`OPINION_PROB_BAR`. Clauses
    that report someone else's words ("the customer wrote that ...", quoted
    text with a reporting verb) are not the author's opinion and are dropped.
``toxicity.verdicts``
    "yes" when the trained classifier (``profanity_check``, a linear SVM over
    character/word n-grams) gives a probability of at least
    :data:`TOXIC_PROB_THRESHOLD`, or when a small hand-written rubric layer
    matches a threat, a dismissive put-down or mockery the classifier misses
    (it only knows offensive *vocabulary*). A classifier hit that is due only
    to a mild expletive or a technical verb ("damn printer", "kill -9") in a
    sentence aimed at nobody is overruled to "no". Every reason cites the
    probability.
``toxicity.reason``
    A deterministic sentence quoting the toxic opinions.
``hallucination``
    Abstains (:class:`~judgeflow.errors.JudgeAbstained`) without context: it
    has no world knowledge to check against and never guesses. With context,
    each checkable output sentence must have its numbers in the context (with
    a compatible unit, in a context sentence about the same thing), its named
    entities as whole phrases, and at least :data:`COVERAGE_MIN` of its
    content words (lower-cased, stop words removed, lightly stemmed; one
    missing word is always allowed). Score = unsupported sentences /
    checkable sentences.

It is a free, private pre-screen, not a replacement for an LLM judge: it does
not understand negation, paraphrase with new vocabulary, put-downs phrased
without offensive words outside its patterns (recall 0.1 on unseen ones), or
claims assembled from true pieces. See the README ("The offline judge") for the measured
figures.

The package, by concern: :mod:`.sentences` (sentence splitting, tokens,
stems), :mod:`.classifier` (the lazily loaded classifier), :mod:`.opinions`,
:mod:`.verdicts` (verdicts and reason), :mod:`.overlap` (context overlap for
hallucination), :mod:`.judge` (the adapter); its quality on the labelled set is measured by
``python -m bench.offline_evaluation``.
"""

from __future__ import annotations

from judgeflow.judge.offline.classifier import toxicity_probabilities
from judgeflow.judge.offline.judge import MODEL_NAME, OfflineJudge
from judgeflow.judge.offline.opinions import OPINION_PROB_BAR, extract_opinions
from judgeflow.judge.offline.overlap import (
    ABSTAIN_NO_CONTEXT,
    COVERAGE_MIN,
    MISSING_WORDS_ALLOWED,
    check_output,
    hallucination_judgement,
)
from judgeflow.judge.offline.sentences import split_sentences
from judgeflow.judge.offline.verdicts import TOXIC_PROB_THRESHOLD, toxic_verdict, toxic_verdicts, toxicity_reason

__all__ = [
    "ABSTAIN_NO_CONTEXT",
    "COVERAGE_MIN",
    "MISSING_WORDS_ALLOWED",
    "MODEL_NAME",
    "OfflineJudge",
    "OPINION_PROB_BAR",
    "TOXIC_PROB_THRESHOLD",
    "check_output",
    "extract_opinions",
    "hallucination_judgement",
    "split_sentences",
    "toxic_verdict",
    "toxic_verdicts",
    "toxicity_probabilities",
    "toxicity_reason",
]
