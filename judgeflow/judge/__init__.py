"""The judge: the one seam between metrics and whatever answers their prompts."""

from __future__ import annotations

from judgeflow.judge.base import Judge, JudgeReply, JudgeRequest

__all__ = ["Judge", "JudgeReply", "JudgeRequest"]
