"""A conversation's result id: what eval_results, claims and labels hold for a session.

A session is the traces of one source that share a metadata value
(``JUDGEFLOW_SESSION_KEY``). Its id is derived, never the value itself: a
value may be 10 KB, or look like a trace id; the same value in two sources is
two sessions (issue 57). ``s:`` then 40 hex digits of sha256 over the source's
identity and the value, so results of sessions and traces of one metric never
share a key by accident (a trace id of that exact shape would; `db check` is
where to say so if it ever matters).
"""

from __future__ import annotations

import hashlib

PREFIX = "s:"


def session_result_id(source_identity: str, session_key: str) -> str:
    digest = hashlib.sha256(f"{source_identity}\x00{session_key}".encode("utf-8", "surrogatepass")).hexdigest()
    return PREFIX + digest[:40]


def is_session_id(result_id: str) -> bool:
    return result_id.startswith(PREFIX) and len(result_id) == len(PREFIX) + 40
