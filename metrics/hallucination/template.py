"""Prompt builder of the hallucination metric (one step, two variants).

With context, the judge checks the output's faithfulness to the context; with
no context, it checks the output against well-established facts. Few-shot
examples are trusted configuration; they are rendered as JSON in the system
message, apart from the untrusted data block in the user message.
"""

from __future__ import annotations

from collections.abc import Sequence

from judgeflow.metrics.data_block import DATA_NOTICE, dumps_text, render_data_block
from pydantic import BaseModel, ConfigDict, Field


class FewShotExample(BaseModel):
    """One worked example shown to the judge: a trace and the judgement expected for it."""

    model_config = ConfigDict(extra="forbid")
    title: str
    input: str
    context: list[str] | None = None
    output: str
    score: float = Field(ge=0.0, le=1.0)
    reason: str


WITH_CONTEXT_INSTRUCTIONS = """\
You are an expert reviewer checking whether an answer written by an AI \
assistant is faithful to the reference material it was given. The JSON object \
holds "input" (the question that was asked), "context" (the reference \
material, a list of passages) and "output" (the answer to check).

Apply these guidelines:
1. Everything the output states must be backed by the context. Information \
the context does not contain is unfaithful, even if it sounds plausible.
2. Nothing in the output may conflict with a statement in the context.
3. Nothing in the output may conflict with widely accepted facts or common \
knowledge.
4. The input only shows what was asked. Do not measure faithfulness against it.
5. Count partial hallucinations: an answer that is right in some parts and \
wrong or unsupported in others is unfaithful.
6. Check who or what each statement is about. Attributes, actions and dates \
must belong to the right entity; for example, an award won by a TV series must \
not be credited to an actor in it.
7. Look for quiet misattributions and blends of separate facts, even where the \
individual details (such as a date) are correct.
8. Flag simplifications or generalisations that change the meaning or the \
precision of what the context says.

Score 0 or 1: 0 means the output is entirely faithful to the context, 1 means \
it contains hallucinated or unfaithful information, partial hallucinations \
included."""

# The seed's guidelines that do not need a context, and nothing else.
NO_CONTEXT_INSTRUCTIONS = """\
You are an expert reviewer checking whether an answer written by an AI \
assistant contains hallucinations or unfaithful information. No reference \
material is available, so judge the answer against well-established facts and \
general knowledge. The JSON object holds "input" (the question that was \
asked) and "output" (the answer to check).

Apply these guidelines:
1. Nothing in the output may conflict with widely accepted facts or common \
knowledge.
2. The input only shows what was asked. Do not treat it as a source of facts.
3. Count partial hallucinations: an answer that is right in some parts and \
wrong in others is hallucinated.
4. Check who or what each statement is about. Attributes, actions and dates \
must belong to the right entity.
5. Look for quiet misattributions and blends of separate facts, even where the \
individual details are correct.
6. Flag simplifications or generalisations that make a statement inaccurate.

Score 0 or 1: 0 means the output contains no hallucination, 1 means it \
contains one, partial hallucinations included."""

EXAMPLES_INTRO = (
    "Worked examples follow as a JSON list. Each shows a sample trace and the "
    "reply expected for it; use them to calibrate your scores, not as facts "
    "about the data you will judge."
)

SHAPE = '{"score": <0 or 1>, "reason": ["<one finding per entry>", "..."]}'

SHAPE_NOTE = "Give one reason per finding; list as many as you need."


def hallucination_messages(
    input: str,
    output: str,
    context: Sequence[str] | None,
    examples: Sequence[FewShotExample] = (),
) -> list[dict[str, str]]:
    """Step ``hallucination``; ``context`` None selects the no-context variant."""
    instructions = WITH_CONTEXT_INSTRUCTIONS if context else NO_CONTEXT_INSTRUCTIONS
    parts = [instructions]
    if examples:
        parts.append(f"{EXAMPLES_INTRO}\n{render_examples(examples)}")
    parts.append(DATA_NOTICE)
    parts.append(
        f"Answer with only a JSON object of this shape, with no text before or after it:\n{SHAPE}\n{SHAPE_NOTE}"
    )
    data: dict[str, object] = {"input": input}
    if context:
        data["context"] = list(context)
    data["output"] = output
    return [
        {"role": "system", "content": "\n\n".join(parts)},
        {"role": "user", "content": render_data_block(data)},
    ]


def render_examples(examples: Sequence[FewShotExample]) -> str:
    rows = []
    for example in examples:
        trace: dict[str, object] = {"input": example.input}
        if example.context:
            trace["context"] = example.context
        trace["output"] = example.output
        rows.append(
            {
                "title": example.title,
                "data": trace,
                "expected_reply": {"score": example.score, "reason": [example.reason]},
            }
        )
    # One line per field, like the data block, and text as written.
    return dumps_text(rows, indent=2)


PROBE_EXAMPLE = FewShotExample(
    title="probe", input="probe input", context=["probe context"], output="probe output", score=1.0, reason="probe"
)


# Non-ASCII probe text, so the version also follows how text is encoded.
PROBE_TEXT = "проба 探针 🙂 بحث"


def probe_prompts() -> list[list[dict[str, str]]]:
    """Every prompt variant rendered with fixed data, for the metric version."""
    return [
        hallucination_messages("probe input", "probe output", ["probe context"]),
        hallucination_messages("probe input", "probe output", None),
        hallucination_messages("probe input", "probe output", ["probe context"], [PROBE_EXAMPLE]),
        hallucination_messages(PROBE_TEXT, PROBE_TEXT, [PROBE_TEXT]),
    ]
