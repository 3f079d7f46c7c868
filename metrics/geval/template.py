"""Prompts of a G-Eval metric (after deepeval's ``GEval`` and Opik's G-Eval).

Two prompts: the score step, which shows the criteria, the evaluation steps
and the trace fields the metric reads; and the one-off step that writes the
evaluation steps from the criteria when the file gives none. The criteria and
steps are trusted configuration (the metric's file) and go in the system
message; the trace goes in the user message between the data markers, as the
built-ins' does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from judgeflow.metrics.data_block import DATA_NOTICE, render_data_block

# what each trace field is, as the judge is told
FIELD_NAMES = {
    "input": '"input" (what the user asked or sent)',
    "output": '"output" (the reply to evaluate)',
    "context": '"context" (the reference material the reply was given, a list of passages; null when none)',
    # a session metric's one field (judgeflow/metrics/conversation.py)
    "conversation": '"conversation" (a conversation between a user and an assistant: its turns in order, each '
                    'with the user\'s "input" and the assistant\'s "output"; a turn {"note": "[N turns omitted]"} '
                    'stands for turns left out to fit)',
}
# the probe conversation of a session metric's version
PROBE_CONVERSATION = [{"input": "probe input", "output": "probe output"}, {"note": "[1 turn omitted]"}]

SHAPE = '{"score": <integer from 0 to 10>, "reason": "<why, in one or two sentences>"}'

SCORE_INSTRUCTIONS = """\
You are an evaluator. Judge the data below against the evaluation criteria, \
following the evaluation steps.

Evaluation criteria:
{criteria}

Evaluation steps:
{steps}

The JSON object holds {fields}.

Score from 0 to 10: 10 means the data fully meets the criteria and follows \
every evaluation step, 0 means it does not meet them at all. Give the reason \
for the score, naming the specific parts of the data it rests on, without \
repeating the score itself."""

STEPS_SHAPE = '{"steps": ["<first step>", "<second step>", "..."]}'

STEPS_INSTRUCTIONS = """\
Given the evaluation criteria below, which say how to judge {fields}, write \
3 to 4 concise evaluation steps an evaluator can follow to apply them. Make \
clear how the fields are to be judged in relation to each other.

Evaluation criteria:
{criteria}

Answer with only a JSON object of this shape, with no text before or after it:
{shape}"""


def _field_list(inputs: Sequence[str]) -> str:
    names = [FIELD_NAMES[name] for name in inputs]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def numbered(steps: Sequence[str]) -> str:
    return "\n".join(f"{index}. {step}" for index, step in enumerate(steps, start=1))


def score_messages(criteria: str, steps: Sequence[str], inputs: Sequence[str],
                   data: dict[str, Any]) -> list[dict[str, str]]:
    """The score step: ``data`` holds the trace's fields named in ``inputs``."""
    system = "\n\n".join([
        SCORE_INSTRUCTIONS.format(criteria=criteria, steps=numbered(steps), fields=_field_list(inputs)),
        DATA_NOTICE,
        f"Answer with only a JSON object of this shape, with no text before or after it:\n{SHAPE}",
    ])
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": render_data_block({name: data.get(name) for name in inputs})},
    ]


def steps_messages(criteria: str, inputs: Sequence[str]) -> list[dict[str, str]]:
    """The one-off step writing the evaluation steps (no trace data in it)."""
    fields = _field_list([name for name in inputs])
    return [{"role": "user", "content": STEPS_INSTRUCTIONS.format(criteria=criteria, fields=fields,
                                                                  shape=STEPS_SHAPE)}]


# Non-ASCII probe text, so the version also follows how text is encoded.
PROBE_TEXT = "проба 探针 🙂 بحث"


def probe_prompts(criteria: str, steps: Sequence[str], inputs: Sequence[str]) -> list[list[dict[str, str]]]:
    """The score prompt rendered with fixed data, for the metric version."""
    probe = {"input": "probe input", "output": "probe output", "context": ["probe context"],
             "conversation": PROBE_CONVERSATION}
    return [
        score_messages(criteria, steps, inputs, probe),
        score_messages(criteria, steps, inputs, {"input": PROBE_TEXT, "output": PROBE_TEXT, "context": None,
                                                 "conversation": [{"input": PROBE_TEXT, "output": PROBE_TEXT}]}),
    ]
