"""Choosing a source preset (JUDGEFLOW_SOURCE), its default segments, and the chat mapping's
handling of shapes a producer may write (pure: no database)."""

from __future__ import annotations

import pytest

from judgeflow.sources.chat import conversation, reply_text
from judgeflow.sources.litellm import LiteLLMSource
from judgeflow.sources.phoenix import PhoenixSource, read_span
from judgeflow.sources.trace_source import trace_source
from judgeflow.errors import ConfigError
from judgeflow.config.settings import Settings


def test_the_setting_picks_the_preset_and_its_segments():
    assert isinstance(trace_source(Settings(source="litellm")), LiteLLMSource)
    assert isinstance(trace_source(Settings(source="phoenix", source_schema="px")), PhoenixSource)
    assert trace_source(Settings(source="phoenix", source_schema="px")).display == "px.spans"
    assert Settings(source="litellm").alert_segment_keys == ("model", "model_group", "team_id", "end_user", "tags")
    assert Settings(source="phoenix").alert_segment_keys == ("project",)
    assert Settings(source="phoenix", alert_segment_by="model").alert_segment_keys == ("model",)
    assert Settings().alert_segment_keys == ()
    with pytest.raises(Exception):
        Settings(source="langfuse")
    with pytest.raises(ConfigError):
        Settings(source="litellm", source_schema='x"; DROP TABLE y; --')


def test_conversation_and_reply_shapes():
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "input_audio", "input_audio": {}}]},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "search"}}]},
        {"role": "tool", "content": "found it"},
    ]
    assert conversation(messages) == "user: look\n[audio not shown]\n\nassistant: [called search]\n\ntool: found it"
    assert reply_text({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}) == ("ok", None)
    assert reply_text({"role": "assistant", "content": "  "}) == (None, "the reply is empty: no text to judge")
    with pytest.raises(ValueError):
        conversation({"messages": "not a list"})


def test_openinference_attribute_shapes():
    """Shapes of OpenInference attributes as Phoenix stores them (the slow test has Phoenix write them)."""
    contents = {"llm": {
        "input_messages": [{"message": {"role": "user", "contents": [
            {"message_content": {"type": "text", "text": "what is this?"}},
            {"message_content": {"type": "image", "image": {"image": {"url": "x"}}}}]}}],
        "output_messages": [{"message": {"role": "assistant", "content": "a cat"}}]}}
    assert read_span(contents, "OK", "") == ("what is this?\n[image not shown]", "a cat", None)
    plain = {"input": {"value": "hi", "mime_type": "text/plain"}, "output": {"value": "hello", "mime_type": "text/plain"}}
    assert read_span(plain, "UNSET", "") == ("hi", "hello", None)
    hidden = {"input": {"value": "__REDACTED__"}, "output": {"value": "__REDACTED__"}}
    assert read_span(hidden, "OK", "")[2].startswith("the app hides LLM outputs")
    assert read_span({}, "ERROR", "boom")[2] == "the LLM call failed (span status ERROR (boom)): there is no reply to judge"


def test_both_presets_assemble_a_row_the_same_way_malformed_content_skipped_and_empty_metadata_dropped():
    from datetime import datetime, timezone

    from judgeflow.sources.phoenix import trace_of as phoenix_trace
    from judgeflow.sources.litellm import trace_of as litellm_trace

    at = datetime(2026, 11, 21, tzinfo=timezone.utc)
    span = phoenix_trace({
        "span_id": "s1", "created_at": at, "attributes": "[1, 2]", "status_code": "OK", "project": "p",
        "trace_id": None, "name": "ChatCompletion", "model": None, "retrievals": None,
    })
    assert (span.id, span.created_at, span.input, span.output, span.context) == ("s1", at, None, None, None)
    assert span.skip == "malformed Phoenix span: the span's attributes are a list, not an object"
    assert span.metadata == {"project": "p", "span_name": "ChatCompletion", "status": "OK"}

    row = litellm_trace({
        "request_id": "r1", "created_at": at, "status": "success", "call_type": "completion",
        "proxy_server_request": '"text"', "response": None, "model": "gpt", "team_id": None,
    })
    assert (row.id, row.created_at, row.input, row.output, row.context) == ("r1", at, None, None, None)
    assert row.skip == "malformed LiteLLM spend-log row: proxy_server_request is a str, not an object"
    assert row.metadata == {"model": "gpt", "call_type": "completion", "status": "success"}

    # a well-formed span keeps its documents as context
    good = phoenix_trace({
        "span_id": "s2", "created_at": at, "status_code": "OK",
        "attributes": {"input": {"value": "q"}, "output": {"value": "a"}},
        "retrievals": [[{"document": {"content": "doc one"}}], [{"document": {"content": " "}}]],
    })
    assert (good.input, good.output, good.context, good.skip) == ("q", "a", ["doc one"], None)
