"""The environment litellm reads, as judgeflow's litellm adapter wants it.

Apart from :mod:`judgeflow.judge.litellm_judge` so that it can be applied
before litellm is imported.
"""

from __future__ import annotations

import os

ENVIRONMENT_DEFAULTS = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    # OpenAI and OpenAI-compatible models through litellm's own HTTP handler rather
    # than the OpenAI SDK's client: the SDK re-validates every request body against
    # its typed schema, CPU the handler does not spend (docs/benchmark.md). Errors, headers
    # and Retry-After reach this adapter the same way (tests/judge cover both
    # paths). Set it to false in the environment to go back to the SDK.
    "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER": "true",
    # litellm's own log handler: errors only (its default is every level a logger lets through),
    # uncoloured; judgeflow reports the judge's errors itself
    "LITELLM_LOG": "ERROR",
}


def apply_environment_defaults() -> None:
    """Set :data:`ENVIRONMENT_DEFAULTS` where the environment does not say
    otherwise. litellm reads both at call time too (the HTTP handler switch on
    every call)."""
    for name, value in ENVIRONMENT_DEFAULTS.items():
        os.environ.setdefault(name, value)


