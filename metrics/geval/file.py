"""Metrics declared in a file (``JUDGEFLOW_METRICS_FILE``, TOML)::

    [metrics.helpfulness]
    criteria = "The reply helps the user with what they asked instead of refusing."
    evaluation_steps = ["Read what the user asked.", "Decide whether the reply helps with it or refuses it."]
    inputs = ["input", "output"]
    threshold = 0.5
    rate_max = 0.10
    rate_on = "corrected"     # optional: its rate rule decides on the rate corrected for the judge's error
    model = "gpt-4o"          # optional: judged by this litellm model (same endpoint and key as the run's)
    segment_by = ["tier"]     # optional: its rules per value of these metadata keys, in place of
                              # JUDGEFLOW_ALERT_SEGMENT_BY's ([]: overall only)

    [metrics.resolved]
    level = "session"         # a rubric over a session's whole conversation (docs/metrics.md,
    criteria = "By the end of the conversation the user's request was resolved."   # "Conversations")

Every field is checked before anything is judged; a problem is one
:class:`MetricError` line (docs/metrics.md) naming the file, the metric and the field.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judgeflow.errors import MetricError
from judgeflow.metrics.geval.metric import DEFAULT_REGRESSION_MIN_INCREASE, GEvalDefinition, geval_spec
from judgeflow.metrics.geval.schema import MAX_STEP_CHARS, MAX_STEPS
from judgeflow.metrics.registry import MetricSpec, origin_of, rate_name, registered

ALLOWED_INPUTS = ("input", "output", "context")
MAX_NAME_CHARS = 40
MAX_CRITERIA_CHARS = 4000
MAX_MODEL_CHARS = 200
# as many metadata keys, as long, as JUDGEFLOW_ALERT_SEGMENT_BY takes
MAX_SEGMENT_KEYS = 8
MAX_KEY_CHARS = 100
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
FIELDS = frozenset({"criteria", "evaluation_steps", "inputs", "threshold", "rate_max", "rate_on", "regression",
                    "strict_mode", "description", "model", "segment_by", "level"})

# the specs of a file's content, so a file read again (a second settings object in one process) keeps the
# steps its metrics were handed
_SPECS: dict[str, tuple[MetricSpec, ...]] = {}


class _Where:
    def __init__(self, path: str, metric: str | None = None):
        self.path, self.metric = path, metric

    def error(self, field: str | None, problem: str) -> MetricError:
        parts = [self.path] + ([f"metric {self.metric}"] if self.metric else []) + ([field] if field else [])
        return MetricError(f"{': '.join(parts)}: {problem}")


def read_file(path: str | Path) -> dict[str, Any]:
    """The file's TOML; unreadable or not TOML is one line naming it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise MetricError(f"JUDGEFLOW_METRICS_FILE {path}: cannot read it: {error.strerror or error}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise MetricError(f"{path}: not UTF-8 text; save the metrics file as UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise MetricError(f"{path}: not valid TOML: {error}") from None


def definitions(path: str | Path, document: Mapping[str, Any]) -> list[GEvalDefinition]:
    """Every metric of a parsed file, each field checked."""
    where = _Where(str(path))
    unknown = sorted(set(document) - {"metrics"})
    if unknown:
        raise where.error(unknown[0], "unknown key; a metrics file holds [metrics.<name>] tables only")
    metrics = document.get("metrics", {})
    if not isinstance(metrics, dict):
        raise where.error("metrics", "must be tables: [metrics.<name>]")
    taken = {name for name in registered() if name not in _file_names()}
    _check_rate_names(str(path), list(metrics), taken)
    return [_definition(_Where(str(path), name), name, table, taken) for name, table in metrics.items()]


def _check_rate_names(path: str, names: list[str], taken: set[str]) -> None:
    """Every trace metric M has a session rate M_session (judgeflow/metrics/registry.py): a file metric
    may not take such a name, nor have its own rate's name taken."""
    rates = {rate_name(name): name for name in [*taken, *names]}
    for name in names:
        if name in rates:
            raise _Where(path, name).error(None, f"clashes with the session rate of metric {rates[name]!r} (every "
                                                 "metric M has M_session); choose another name")


def _file_names() -> set[str]:
    return {name for name in registered() if origin_of(name) == "file"}


def _definition(where: _Where, name: str, table: Any, taken: set[str]) -> GEvalDefinition:
    _check_name(where, name, taken)
    if not isinstance(table, dict):
        raise where.error(None, "must be a table of fields: [metrics." + name + "]")
    for key in table:
        if key not in FIELDS:
            raise where.error(key, f"unknown field; the fields are {', '.join(sorted(FIELDS))}")
    if "criteria" not in table:
        raise where.error("criteria", "missing: say what the judge is to check")
    level = _level(where, table.get("level", "trace"))
    if level == "session" and "inputs" in table:
        raise where.error("inputs", 'a level = "session" metric reads the whole conversation (each turn\'s input '
                                    "and output): leave inputs out")
    return GEvalDefinition(
        name=name, criteria=_text(where, "criteria", table["criteria"], MAX_CRITERIA_CHARS),
        inputs=_inputs(where, table.get("inputs", ["input", "output"])), level=level,
        evaluation_steps=_steps(where, table.get("evaluation_steps")),
        threshold=_share(where, "threshold", table.get("threshold", 0.5)),
        rate_max=None if "rate_max" not in table else _share(where, "rate_max", table["rate_max"]),
        rate_on=_rate_on(where, table.get("rate_on", "judged")),
        regression_min_increase=_regression(where, table.get("regression", False)),
        strict_mode=_strict(where, table.get("strict_mode", 0)),
        description=_text(where, "description", table.get("description", ""), 500, empty=True),
        model=None if "model" not in table else _model(where, table["model"]),
        segment_by=None if "segment_by" not in table else segment_keys(where, table["segment_by"]),
    )


def _check_name(where: _Where, name: str, taken: set[str]) -> None:
    if not name or not set(name) <= _NAME_CHARS or not name[0].isalpha() or len(name) > MAX_NAME_CHARS:
        raise where.error(None, f"bad metric name: lowercase letters, digits and '_', starting with a letter, at "
                                f"most {MAX_NAME_CHARS} characters")
    if name in taken:
        raise where.error(None, "clashes with a built-in or plugin metric of that name; choose another name")


def _text(where: _Where, field: str, value: Any, limit: int, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise where.error(field, f"must be text, got {_kind(value)}")
    if not value.strip() and not empty:
        raise where.error(field, "must not be empty")
    if len(value) > limit:
        raise where.error(field, f"at most {limit} characters, got {len(value)}")
    return value.strip()


def _model(where: _Where, value: Any) -> str:
    """A litellm model string; the run's endpoint and key go with it."""
    model = _text(where, "model", value, MAX_MODEL_CHARS)
    if any(c.isspace() or not c.isprintable() for c in model):
        raise where.error("model", f"a litellm model name has no spaces, got {model!r}")
    if model == "offline" or model.startswith("offline/"):
        raise where.error("model", "the offline judge has no rubric for a file metric; name a litellm model, or "
                                   "leave model out to use JUDGEFLOW_JUDGE_MODEL")
    return model


def segment_keys(where: _Where, value: Any) -> tuple[str, ...]:
    """Metadata keys, each as written (a key is matched exactly, as in JUDGEFLOW_ALERT_SEGMENT_BY)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error("segment_by", f'must be a list of metadata keys, e.g. ["tier"] ([]: overall only), got '
                                        f"{_kind(value)}")
    if len(value) > MAX_SEGMENT_KEYS:
        raise where.error("segment_by", f"at most {MAX_SEGMENT_KEYS} keys, got {len(value)}")
    for key in value:
        if not key.strip() or key != key.strip() or len(key) > MAX_KEY_CHARS:
            raise where.error("segment_by", f"bad key {key[:MAX_KEY_CHARS]!r}: a metadata key of 1 to "
                                            f"{MAX_KEY_CHARS} characters, without spaces around it")
        # ',' separates keys in JUDGEFLOW_ALERT_SEGMENT_BY and '=' a key from its value in a segment's name
        if any(c in ",=" or not c.isprintable() for c in key):
            raise where.error("segment_by", f"bad key {key!r}: no ',', '=' or control characters")
    if len(set(value)) != len(value):
        raise where.error("segment_by", "names a key twice")
    return tuple(value)


def _level(where: _Where, value: Any) -> str:
    if value not in ("trace", "session"):
        raise where.error("level", f'must be "trace" (each trace, the default) or "session" (a conversation), '
                                   f"got {value!r}")
    return value


def _inputs(where: _Where, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise where.error("inputs", f"must be a list of {', '.join(ALLOWED_INPUTS)}")
    unknown = [v for v in value if v not in ALLOWED_INPUTS]
    if unknown:
        raise where.error("inputs", f"unknown input {unknown[0]!r}; choose from {', '.join(ALLOWED_INPUTS)}")
    if len(set(value)) != len(value):
        raise where.error("inputs", "names an input twice")
    if "output" not in value:
        raise where.error("inputs", "must include 'output': the reply is what every metric judges")
    return tuple(name for name in ALLOWED_INPUTS if name in value)


def _steps(where: _Where, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise where.error("evaluation_steps", "must be a list of non-empty sentences")
    if len(value) > MAX_STEPS or any(len(v) > MAX_STEP_CHARS for v in value):
        raise where.error("evaluation_steps", f"at most {MAX_STEPS} steps of at most {MAX_STEP_CHARS} characters")
    return tuple(v.strip() for v in value)


def _share(where: _Where, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(field, f"must be a number from 0 to 1, got {_kind(value)}")
    if not 0 <= value <= 1:
        raise where.error(field, f"must be from 0 to 1, got {value!r}")
    return float(value)


def _regression(where: _Where, value: Any) -> float | None:
    """``true``: the rule on, paging at the default rise; a number: the rise; ``false``: off."""
    if value is True:
        return DEFAULT_REGRESSION_MIN_INCREASE
    if value is False:
        return None
    share = _share(where, "regression", value)
    if share == 0:
        raise where.error("regression", "a rise of 0 would page on noise; give true or a rise above 0")
    return share


def _strict(where: _Where, value: Any) -> bool:
    if value in (0, 1) and isinstance(value, (bool, int)):
        return bool(value)
    raise where.error("strict_mode", f"must be 0 or 1, got {value!r}")


def _rate_on(where: _Where, value: Any) -> str:
    if value in ("judged", "corrected"):
        return value
    raise where.error("rate_on", f"must be \"judged\" or \"corrected\", got {value!r}")


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def load_metrics_file(path: str | Path) -> tuple[MetricSpec, ...]:
    """The specs of the metrics in ``path``, every field checked; nothing is registered."""
    document = read_file(path)
    digest = hashlib.sha256(repr(sorted(document.items())).encode() + str(path).encode()).hexdigest()
    if digest not in _SPECS:
        _SPECS[digest] = tuple(geval_spec(d) for d in definitions(path, document))
    return _SPECS[digest]
