"""A session as `judgeflow show` tells it: found by its result id or by its key's value in the
configured source, its turns, and each session metric's scores, newest first (the latest is the
one rates, alerts and reports count; the earlier ones are its history, 25_session_scores.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from judgeflow.metrics.registry import registered
from judgeflow.sources.session_id import is_session_id

# a key's value printed at most this long (a value may be 10 KB)
KEY_SHOWN_CHARS = 200


def find_session(conn: Connection, source: str, wanted: str) -> dict[str, Any] | None:
    """The session whose result id is ``wanted``, else the one of ``source`` whose key's value it is
    (``sessions_source_key_idx``: md5 of the value, so a long value is found by its index)."""
    if is_session_id(wanted):
        sql, params = "session_id = :id", {"id": wanted}
    else:
        sql, params = "source = :source AND md5(session_key) = md5(:key) AND session_key = :key", \
            {"source": source, "key": wanted}
    row = conn.execute(text(
        f"SELECT session_id, source, session_key, first_turn_at, last_turn_at, turns, judged_turns, judged_at "
        f"FROM judgeflow.sessions WHERE {sql} LIMIT 1"), params).mappings().first()
    return None if row is None else dict(row)


def session_scores(conn: Connection, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """Each metric's scores of the session, newest first, each with the turns it saw."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in conn.execute(text(
        """
        SELECT metric, status, score, passed, reason, error, turns, metric_version, flow_run_id, judged_at
        FROM judgeflow.session_scores WHERE session_id = :id ORDER BY metric, judged_at DESC, id DESC
        """
    ), {"id": session_id}).mappings():
        out.setdefault(r["metric"], []).append({k: v for k, v in r.items() if k != "metric"})
    return out


def session_json(session: dict[str, Any], scores: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    key = session["session_key"]
    return {
        "session_id": session["session_id"], "source": session["source"],
        "session_key": key[:KEY_SHOWN_CHARS], "session_key_chars": len(key), "turns": session["turns"],
        "first_turn_at": session["first_turn_at"], "last_turn_at": session["last_turn_at"],
        "judged_turns": session["judged_turns"], "judged_at": session["judged_at"],
        "left_out": _left_out(session, scores),
        "metrics": {metric: {"latest": entries[0], "history": entries} for metric, entries in scores.items()},
    }


def _left_out(session: dict[str, Any], scores: dict[str, list[dict[str, Any]]]) -> bool:
    """A sampled night decided it out at its turns: marked, yet judged by no session metric at them
    (judgeflow/sampling/sessions.py). Session rates, computed for every quiet session, do not count;
    with no session metric served, a marked session was never to be judged."""
    judged = {name for name, spec in registered().items() if spec.level == "session"}
    seen = {h["turns"] for metric, entries in scores.items() if metric in judged for h in entries}
    return session["judged_turns"] is not None and bool(judged) and session["judged_turns"] not in seen


def render_session(doc: dict[str, Any]) -> str:
    key = doc["session_key"] + ("..." if doc["session_key_chars"] > KEY_SHOWN_CHARS else "")
    if doc["judged_turns"] is None:
        judged = "not judged yet"
    elif doc.get("left_out"):
        judged = f"left out of a sampled night at {doc['judged_turns']} turns (considered again once it grows)"
    else:
        judged = f"last judged at {doc['judged_turns']} turns"
    lines = [f"session {doc['session_id']} (key {key!r}, {doc['source']})",
             f"  turns: {doc['turns']} ({doc['first_turn_at']:%Y-%m-%d %H:%M:%S} to "
             f"{doc['last_turn_at']:%Y-%m-%d %H:%M:%S} UTC); {judged}"]
    if not doc["metrics"]:
        lines.append("  no session metric has judged it yet")
    for metric, entry in doc["metrics"].items():
        lines.append(f"  {metric}:")
        for i, h in enumerate(entry["history"]):
            score = "-" if h["score"] is None else f"{h['score']:.3f}"
            passed = {True: "pass", False: "FAIL", None: h["status"]}[h["passed"]]
            what = h["reason"] or h["error"] or ""
            lines.append(f"    {'latest ' if i == 0 else 'earlier'} {score} {passed} at {h['turns']} turns, "
                         f"{h['judged_at']:%Y-%m-%d %H:%M:%S} UTC: {what}")
    return "\n".join(lines)
