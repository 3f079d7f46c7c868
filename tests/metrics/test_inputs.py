"""Normalisation of trace fields before prompting."""

from __future__ import annotations

import pytest
from judgeflow.metrics.inputs import normalise_trace

from judgeflow.errors import ConfigError, InvalidTraceError


def test_plain_strings_pass_through() -> None:
    trace = normalise_trace("q", "a", ["c1", "c2"])
    assert (trace.input, trace.output, trace.context, trace.notes) == ("q", "a", ["c1", "c2"], {})


def test_null_output_is_an_invalid_trace() -> None:
    with pytest.raises(InvalidTraceError, match="output is null"):
        normalise_trace("q", None)


def test_non_string_output_is_an_invalid_trace() -> None:
    with pytest.raises(InvalidTraceError, match="output must be a string, got dict"):
        normalise_trace("q", {"content": "hi"})


def test_null_input_becomes_empty_string() -> None:
    assert normalise_trace(None, "a").input == ""


def test_structured_input_is_serialised() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert normalise_trace(messages, "a").input == '[{"role": "user", "content": "hi"}]'
    assert normalise_trace(42, "a").input == "42"


@pytest.mark.parametrize("output", ["", "   ", "\n\t "])
def test_empty_output_is_flagged(output: str) -> None:
    assert normalise_trace("q", output).output_is_empty


def test_long_fields_are_truncated_and_reported() -> None:
    trace = normalise_trace("i" * 15, "o" * 12, max_field_chars=10)
    assert trace.input == "i" * 10 and trace.output == "o" * 10
    assert trace.notes["truncated"] == {"input": 15, "output": 12}


def test_field_at_the_limit_is_not_truncated() -> None:
    assert "truncated" not in normalise_trace("q", "o" * 10, max_field_chars=10).notes


def test_context_shares_one_budget() -> None:
    trace = normalise_trace("q", "a", ["aaaa", "bbbb", "cccc"], max_field_chars=6)
    assert trace.context == ["aaaa", "bb"]
    assert trace.notes["truncated"] == {"context": 12}


def test_default_limit_is_20000() -> None:
    trace = normalise_trace("q", "x" * 20_001)
    assert len(trace.output) == 20_000
    assert trace.notes["truncated"] == {"output": 20_001}


@pytest.mark.parametrize("context", [None, []])
def test_missing_or_empty_context_means_no_context(context: object) -> None:
    trace = normalise_trace("q", "a", context)
    assert trace.context is None
    assert trace.notes == {}


@pytest.mark.parametrize(
    ("context", "dropped"), [([""], 1), ("  ", 1), ([" ", ""], 2), (["\n\t", None, "\u3000"], 2)]
)
def test_blank_context_means_no_context(context: object, dropped: int) -> None:
    trace = normalise_trace("q", "a", context)
    assert trace.context is None
    assert trace.notes["context_blank_dropped"] == dropped


def test_blank_context_items_are_dropped_before_the_budget() -> None:
    trace = normalise_trace("q", "a", ["   ", "passage", "", "  more  "], max_field_chars=12)
    assert trace.context == ["passage", "  mor"]
    assert trace.notes == {"context_blank_dropped": 2, "truncated": {"context": 15}}


def test_single_string_context_is_wrapped() -> None:
    assert normalise_trace("q", "a", "the only passage").context == ["the only passage"]


def test_context_items_are_coerced_and_counted() -> None:
    trace = normalise_trace("q", "a", ["text", 3, 2.5, True, None, {"k": "v"}, ["x", 1]])
    assert trace.context == ["text", "3", "2.5", "True", '{"k": "v"}', '["x", 1]']
    assert trace.notes["context_coerced"] == 6


def test_context_of_only_none_items_means_no_context() -> None:
    trace = normalise_trace("q", "a", [None, None])
    assert trace.context is None
    assert trace.notes["context_coerced"] == 2


@pytest.mark.parametrize("context", [{"passage": "x"}, 42, b"bytes"])
def test_context_of_other_types_is_rejected(context: object) -> None:
    with pytest.raises(InvalidTraceError, match="context must be a list of strings"):
        normalise_trace("q", "a", context)


def test_context_item_of_unsupported_type_is_rejected() -> None:
    with pytest.raises(InvalidTraceError, match=r"context\[1\]"):
        normalise_trace("q", "a", ["ok", object()])


@pytest.mark.parametrize("limit", [0, -1, 2.5, True])
def test_bad_max_field_chars_is_a_config_error(limit: object) -> None:
    with pytest.raises(ConfigError):
        normalise_trace("q", "a", max_field_chars=limit)  # type: ignore[arg-type]
