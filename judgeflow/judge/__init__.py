"""The judge: the one seam between metrics and whatever answers their prompts."""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Judge", "JudgeReply", "JudgeRequest"]

if TYPE_CHECKING:
    from judgeflow.judge.base import Judge, JudgeReply, JudgeRequest


def __getattr__(name: str):
    # Lazily: `judgeflow` hands a command to the judge host through
    # judgeflow.judge.host before anything heavy is imported, and
    # judgeflow.judge.base imports pydantic (~0.13 s).
    if name in __all__:
        from judgeflow.judge import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
