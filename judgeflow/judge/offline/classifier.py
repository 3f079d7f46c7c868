"""The trained offensive-language classifier (``profanity_check``, a linear
SVM over character/word n-grams), loaded lazily, once per process. Both the
opinion filter and the verdicts ask it for probabilities."""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, Sequence

_classifier_lock = threading.Lock()
_classifier: Callable[[list[str]], Any] | None = None


def _predict_prob() -> Callable[[list[str]], Any]:
    """``profanity_check.predict_prob``; the import loads a ~2 MB model, so it
    happens on first use, under a lock, once per process."""
    global _classifier
    if _classifier is None:
        with _classifier_lock:
            if _classifier is None:
                with warnings.catch_warnings():
                    # the pickled model may predate the installed scikit-learn
                    warnings.simplefilter("ignore")
                    from profanity_check import predict_prob
                _classifier = predict_prob
    return _classifier


def toxicity_probabilities(texts: Sequence[str]) -> list[float]:
    """Classifier probability that each text is offensive."""
    if not texts:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [float(p) for p in _predict_prob()(list(texts))]


def is_loaded() -> bool:
    """Whether the first call (which loads the ~2 MB model) has happened."""
    return _classifier is not None
