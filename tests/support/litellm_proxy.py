"""LiteLLM proxy spend logs made by LiteLLM's own code, for the ``litellm`` source preset's tests.

* The table: :func:`create_template_database` applies the SQL migrations that the
  ``litellm-proxy-extras`` package ships (the proxy's ``prisma migrate deploy``), in order,
  to a template database; each test's database is a copy of it (:func:`create_database`).
* The rows: ``python -m tests.support.litellm_proxy --api-base URL`` (a subprocess: it
  imports ``litellm.proxy``, which a test process should not carry) makes real
  ``litellm.acompletion`` calls against :func:`app_responder` (a
  :class:`~tests.support.judge_server.JudgeServer` standing in for the proxied model),
  with the request data the proxy adds (``proxy_server_request``, key/team/end-user
  metadata, tags), and turns each logged call into a spend-log row with the proxy's
  ``get_logging_payload`` (``STORE_PROMPTS_IN_SPEND_LOGS=true`` unless
  ``--no-store-prompts``), as the proxy's spend writer does; it prints them as JSON.
* :func:`insert_spend_logs` writes them as the proxy's ``create_many(skip_duplicates=True)``
  does: JSON strings into the jsonb columns, timestamps as UTC wall time.

Each scenario's ``reply:`` text is what the model answers; the judge server's rules then
score it (``[toxic]``, ``[halluc=0.75]``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from tests.support.judge_server import ChatRequest, Reply, error_reply

TEMPLATE = "litellm_proxy_template"
PROXY_MODEL = "app-model"

# name -> (request body the client sent to the proxy, proxy-side metadata)
SCENARIOS: dict[str, dict] = {
    "single": {
        "messages": [
            {"role": "system", "content": "You are a travel assistant."},
            {"role": "user", "content": "What is the capital of France? reply: Paris is the capital of France."},
        ],
        "user": "alice", "team": "team-a", "tags": ["prod", "chat"],
    },
    "multi_turn": {
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "My order is late."},
            {"role": "assistant", "content": "I am sorry to hear that. What is the order number?"},
            {"role": "user", "content": "It is 1234, fix it now. reply: You are an idiot [toxic]. It ships today."},
        ],
        "user": "bob", "team": "team-b", "tags": ["prod"],
    },
    "tool_call": {
        "messages": [{"role": "user", "content": "What is the weather in Paris? reply: [tool]"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }}],
        "user": "alice", "team": "team-a", "tags": ["prod", "agent"],
    },
    "failure": {
        "messages": [{"role": "user", "content": "Summarise this. reply: [fail]"}],
        "user": "carol", "team": "team-a", "tags": ["prod"],
    },
    "cached": {
        "messages": [{"role": "user", "content": "Name a prime number. reply: Seven is a prime number."}],
        "user": "dave", "team": "team-b", "tags": ["batch"], "repeat": 2,
    },
    "streamed": {
        "messages": [{"role": "user", "content": "Tell me a story. reply: Once upon a time a fox [halluc=0.75] flew."}],
        "user": "erin", "team": "team-b", "tags": ["prod", "stream"], "stream": True,
    },
    "empty": {
        "messages": [{"role": "user", "content": "Say nothing. reply: [empty]"}],
        "user": "alice", "team": "team-a", "tags": [],
    },
    "unstored": {  # logged while the proxy did not store prompts (store_prompts_in_spend_logs off)
        "messages": [{"role": "user", "content": "Hello. reply: Hi there."}],
        "user": "frank", "team": "team-a", "tags": ["prod"], "store_prompts": False,
    },
    "image": {
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture? reply: A cat sits on a mat."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]}],
        "user": "bob", "team": "team-b", "tags": ["vision"],
    },
}


def app_responder(req: ChatRequest) -> Reply:
    """The proxied model: answers the text after ``reply:`` in the last user message;
    ``[tool]`` asks for a tool call, ``[fail]`` fails with a 500, ``[empty]`` answers ''."""
    last = ""
    for message in reversed(req.messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            last = content if isinstance(content, str) else " ".join(
                str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            break
    answer = last.split("reply:", 1)[1].strip() if "reply:" in last else "I can help with that."
    if answer == "[fail]":
        return error_reply(500, "the model is overloaded")
    if answer == "[tool]":
        return Reply(body={
            "id": "chatcmpl-tool", "object": "chat.completion", "created": 1, "model": req.model,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        })
    return Reply(content="" if answer == "[empty]" else answer)


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------


def migration_dirs() -> list[Path]:
    """The proxy's migrations, in the order prisma applies them (by folder name)."""
    import litellm_proxy_extras

    root = Path(litellm_proxy_extras.__file__).parent / "migrations"
    return sorted((p for p in root.iterdir() if (p / "migration.sql").is_file()), key=lambda p: p.name)


def create_template_database(admin_conninfo: str, conninfo_for) -> str:
    """A database named :data:`TEMPLATE` with every proxy migration applied."""
    with psycopg.connect(admin_conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
        conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    with psycopg.connect(conninfo_for(TEMPLATE), autocommit=True) as conn:
        for folder in migration_dirs():
            conn.execute((folder / "migration.sql").read_text())
    return TEMPLATE


# ---------------------------------------------------------------------------
# the rows
# ---------------------------------------------------------------------------

JSON_COLUMNS = ("metadata", "request_tags", "messages", "response", "proxy_server_request")


def insert_spend_logs(conninfo: str, rows: list[dict]) -> int:
    """Rows as the proxy's spend writer inserts them (``create_many(skip_duplicates=True)``):
    the payload's JSON strings go to the jsonb columns, its UTC datetimes to the
    ``timestamp(3)`` columns as UTC wall time (what prisma writes)."""
    written = 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for row in rows:
            values = {}
            for key, value in row.items():
                if key.startswith("_"):  # the producer's own notes, not columns
                    continue
                if key in ("startTime", "endTime", "completionStartTime") and isinstance(value, str):
                    value = datetime.fromisoformat(value).astimezone(timezone.utc).replace(tzinfo=None)
                elif key in JSON_COLUMNS and not isinstance(value, str) and value is not None:
                    value = json.dumps(value)
                values[key] = value
            columns = ", ".join(f'"{k}"' for k in values)
            marks = ", ".join(f"%({k})s::jsonb" if k in JSON_COLUMNS else f"%({k})s" for k in values)
            written += conn.execute(
                f'INSERT INTO "LiteLLM_SpendLogs" ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING', values
            ).rowcount
    return written


def produce(api_base: str, *, store_prompts: bool = True, timeout_s: float = 300) -> list[dict]:
    """Spend-log rows of every scenario, made in a subprocess (see the module doc)."""
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    args = [sys.executable, "-m", "tests.support.litellm_proxy", "--api-base", api_base]
    if not store_prompts:
        args.append("--no-store-prompts")
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise RuntimeError(f"spend-log producer failed ({done.returncode}): {done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _as_written(payload, kwargs: dict) -> dict:
    """The payload as the proxy's spend writer stores it: the call's cost in ``spend``."""
    row = dict(payload)
    row["spend"] = kwargs.get("response_cost") or 0.0
    return row


async def _produce(api_base: str) -> list[dict]:
    import litellm
    from litellm.caching.caching import Cache
    from litellm.integrations.custom_logger import CustomLogger
    from litellm.litellm_core_utils.litellm_logging import StandardLoggingPayloadSetup
    from litellm.proxy.spend_tracking.spend_tracking_utils import get_logging_payload

    rows: list[dict] = []
    logged = asyncio.Event()

    class SpendWriter(CustomLogger):
        """What the proxy's cost callback does with a logged call: one spend-log payload."""

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            rows.append(_as_written(get_logging_payload(kwargs, response_obj, start_time, end_time), kwargs))
            logged.set()

        async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
            # the proxy's failure hook marks the request's metadata so before writing its row
            metadata = kwargs["litellm_params"].setdefault("metadata", {})
            metadata["status"] = "failure"
            metadata["error_information"] = StandardLoggingPayloadSetup.get_error_information(
                original_exception=kwargs.get("exception") or response_obj, traceback_str=""
            )
            if kwargs.get("completion_start_time") is None:  # the proxy's request data has none: end time
                kwargs.pop("completion_start_time", None)
            exception = kwargs.get("exception") or response_obj
            rows.append(_as_written(get_logging_payload(kwargs, exception, start_time, end_time), kwargs))
            logged.set()

    # litellm's documented switches for callbacks and the proxy's response cache
    litellm.callbacks = [SpendWriter()]
    litellm.cache = Cache(type="local")
    for name, scenario in SCENARIOS.items():
        body = {"model": PROXY_MODEL, "messages": scenario["messages"], "user": scenario["user"],
                "metadata": {"tags": scenario["tags"]}}
        if "tools" in scenario:
            body["tools"] = scenario["tools"]
        if scenario.get("stream"):
            body["stream"] = True
        stored = os.environ["STORE_PROMPTS_IN_SPEND_LOGS"]
        if scenario.get("store_prompts") is False:
            os.environ["STORE_PROMPTS_IN_SPEND_LOGS"] = "false"  # read by litellm at each logged call
        for _ in range(scenario.get("repeat", 1)):
            before = len(rows)
            logged.clear()
            kwargs = dict(
                model=f"openai/{PROXY_MODEL}", api_base=api_base, api_key="sk-app", messages=scenario["messages"],
                user=scenario["user"], num_retries=0, max_retries=0,
                caching=name == "cached", tools=scenario.get("tools"), stream=bool(scenario.get("stream")),
                proxy_server_request={"url": "http://127.0.0.1:4000/chat/completions", "method": "POST",
                                      "headers": {"content-type": "application/json"}, "body": body},
                metadata={"tags": scenario["tags"], "user_api_key_team_id": scenario["team"],
                          "user_api_key_end_user_id": scenario["user"], "user_api_key_hash": "hashed-key-1",
                          "user_api_key_alias": "app-key", "model_group": PROXY_MODEL,
                          "scenario": name},
            )
            try:
                response = await litellm.acompletion(**kwargs)
                if scenario.get("stream"):
                    async for _chunk in response:
                        pass
            except Exception:
                if name != "failure":
                    raise
            for _ in range(200):  # callbacks run after the call returns
                if len(rows) > before:
                    break
                await asyncio.sleep(0.05)
            if len(rows) <= before:
                raise RuntimeError(f"scenario {name}: litellm logged nothing")
            rows[-1].setdefault("_scenario", name)
        os.environ["STORE_PROMPTS_IN_SPEND_LOGS"] = stored
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--no-store-prompts", action="store_true")
    args = parser.parse_args(argv)
    os.environ["STORE_PROMPTS_IN_SPEND_LOGS"] = "false" if args.no_store_prompts else "true"
    rows = asyncio.run(_produce(args.api_base))
    print(json.dumps(rows, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
