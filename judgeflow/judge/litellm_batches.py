"""Judge calls through the provider's batch API, via litellm's batch functions.

The second module importing litellm (after :mod:`judgeflow.judge.litellm_judge`,
whose request building, reply building, error translation and scrubbing it
reuses): a run uses :class:`LiteLLMBatches` without knowing litellm.

* **What can batch.** A provider litellm uploads files to, creates, retrieves
  and reads batches for: the ``custom_llm_provider`` values its public batch
  functions accept (:func:`batch_providers`). Anything else is refused at start
  (:meth:`LiteLLMBatches.can_batch`), not by failing each call.
* **Same request.** A line's body is what the online call sends for the same
  :class:`~judgeflow.judge.base.JudgeRequest`: model (without litellm's
  provider prefix), messages, ``temperature``, the response format as the online
  call converts it, and the judge's extra arguments. One file asks one model, as
  OpenAI requires.
* **Same reply.** An output line's completion goes through the online reply
  path (``LiteLLMJudge._reply``): content, usage and model come the same way;
  only its cost is the batch price (:meth:`LiteLLMBatches.line_cost`).
* **Same errors.** A line the provider answered with an error status is the
  typed error the online call gets for that status (429, 408/409/425 and 5xx
  transient; other 4xx permanent); a line the batch never ran (it expired, or
  was cancelled) is transient: the run decides whether to send it again.
* **Same key rules.** Every call passes the judge's ``api_base`` and key, as the
  online calls do, so the checks of :mod:`judgeflow.config.key_transport` at
  start cover these calls too; errors are scrubbed of both.
* **Limits.** One file holds at most ``max_lines`` requests and ``max_bytes``
  bytes (OpenAI's: 50,000 and 200 MB); :meth:`LiteLLMBatches.pack` splits a
  round's lines into as few files as that allows, and ``submit`` refuses more.
* **Found by its token.** A batch is created with its run's token in its
  ``metadata``; :meth:`LiteLLMBatches.find` looks it up in the provider's list
  of batches (a run that never learnt its id). A provider litellm cannot list
  (``alist_batches``: not bedrock, mistral) finds none.
* **No retries here.** Every litellm call passes ``max_retries=0``: a retried
  ``create`` after a lost reply could start a batch twice and bill it twice.
  The run owns what is tried again.
"""

from __future__ import annotations

from judgeflow.judge.litellm_env import apply_environment_defaults

# before litellm is imported (as judgeflow.judge.litellm_judge does): it reads its price map's
# source at import, and this module may be the first to import it
apply_environment_defaults()

import inspect  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import typing  # noqa: E402
import uuid  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

import litellm  # noqa: E402

from judgeflow.errors import JudgeError, PermanentJudgeError, TransientJudgeError  # noqa: E402
from judgeflow.judge.base import JudgeReply, JudgeRequest  # noqa: E402
from judgeflow.judge.batch_status import BatchStatus  # noqa: E402
from judgeflow.judge.config import is_offline_model  # noqa: E402
from judgeflow.judge.spend import usage_cost  # noqa: E402
from judgeflow.judge.litellm_judge import LiteLLMJudge, _scrub, _translate, model_batch_prices  # noqa: E402
from litellm.llms.base_llm.base_utils import type_to_response_format_param  # noqa: E402

if TYPE_CHECKING:
    from judgeflow.judge.config import JudgeConfig
    from judgeflow.judge.retry import AttemptFailed
    from judgeflow.judge.send_gate import Call

__all__ = ["BatchStatus", "LiteLLMBatches", "batch_providers"]

log = logging.getLogger("judgeflow.batches")

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
# OpenAI's limits on one batch's input file
MAX_LINES = 50_000
MAX_FILE_BYTES = 200 * 1024 * 1024
# the batch functions a run needs; a provider must be accepted by each
_RUN_FUNCTIONS = ("acreate_file", "acreate_batch", "aretrieve_batch", "afile_content")
_LIST_PAGE = 100  # batches per page of the provider's list (OpenAI's most)
# providers whose batch files and calls are OpenAI's own shape; the others need the model to find litellm's config
_OPENAI_SHAPED = frozenset({"openai", "hosted_vllm", "litellm_proxy", "azure"})
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
# the keyword arguments of an online call that are the client's, not the request body's
_NOT_BODY = ("timeout", "num_retries", "max_retries", "api_base", "api_key", "client")


def batch_providers() -> frozenset[str]:
    """The ``custom_llm_provider`` values every one of litellm's batch functions
    a run calls accepts, read from their signatures (litellm's public API)."""
    accepted = None
    for name in _RUN_FUNCTIONS:
        values = _accepted(getattr(litellm, name))
        accepted = values if accepted is None else accepted & values
    return accepted or frozenset()


def _accepted(function: Any) -> frozenset[str]:
    """The ``custom_llm_provider`` values one of litellm's batch functions accepts (its signature)."""
    annotation = inspect.signature(function).parameters["custom_llm_provider"].annotation
    return frozenset(v for v in typing.get_args(annotation) if isinstance(v, str))


def _status_error(status: int, message: str, where: str) -> JudgeError:
    """The typed error an online call gets for ``status`` (see the module doc)."""
    if 200 <= status < 300:  # a success whose body is not a chat completion
        err: JudgeError = TransientJudgeError(f"{where}: unreadable response body (HTTP {status}): {message}")
    elif status == 429:
        err = TransientJudgeError(f"{where}: rate limited (HTTP 429): {message}")
    elif status >= 500 or status in _TRANSIENT_STATUSES:
        err = TransientJudgeError(f"{where}: server error (HTTP {status}): {message}")
    elif status in (401, 403):
        err = PermanentJudgeError(f"{where}: authentication or permission failed (HTTP {status})")
    else:
        label = {404: "model or endpoint not found", 422: "request not processable"}.get(status, "bad request")
        err = PermanentJudgeError(f"{where}: {label} (HTTP {status}): {message}")
    err.status_code = status  # type: ignore[attr-defined]
    return err


def _status_of(batch: Any) -> BatchStatus:
    counts = getattr(batch, "request_counts", None)
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    return BatchStatus(
        id=str(batch.id), status=str(batch.status),
        total=int(getattr(counts, "total", 0) or 0), completed=int(getattr(counts, "completed", 0) or 0),
        failed=int(getattr(counts, "failed", 0) or 0),
        output_file_id=batch.output_file_id or None, error_file_id=batch.error_file_id or None,
        created_at=batch.created_at, expires_at=batch.expires_at,
        errors=tuple(f"{getattr(e, 'code', None) or 'error'}: {getattr(e, 'message', '')}" for e in errors),
    )


class LiteLLMBatches:
    """Submit, follow, read and cancel batches of judge calls (see the module doc)."""

    def __init__(self, config: "JudgeConfig", *, max_lines: int = MAX_LINES, max_bytes: int = MAX_FILE_BYTES):
        self._judge = LiteLLMJudge.from_config(config)
        self._config = config
        self.batch_discount = config.batch_discount
        self.max_lines = max_lines
        self.max_bytes = max_bytes

    @classmethod
    def from_config(cls, config: "JudgeConfig") -> "LiteLLMBatches":
        return cls(config)

    # ---- what can batch -----------------------------------------------------------

    def _provider(self, model: str) -> tuple[str, str]:
        """(the model's name at its provider, litellm's provider)."""
        name, provider, _, _ = litellm.get_llm_provider(model=model, api_base=self._config.api_base)
        return name, provider

    def can_batch(self, model: str | None = None) -> str | None:
        """None when litellm can batch ``model`` (None: the judge's); else why not, in one line."""
        model = model or self._config.model
        if is_offline_model(model):
            return "the offline judge sends no calls to batch"
        try:
            _, provider = self._provider(model)
        except Exception as exc:  # noqa: BLE001 - an unknown provider is a reason, said once
            return f"litellm cannot tell the provider of {model!r}: {_scrub(str(exc), self._config.secrets())[:200]}"
        accepted = batch_providers()
        if provider not in accepted:
            return (f"litellm has no batch API for provider {provider!r} (model {model!r}); "
                    f"it batches {', '.join(sorted(accepted))}")
        return None

    # ---- the calls ------------------------------------------------------------------

    def _kwargs(self, provider: str, model: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"custom_llm_provider": provider, "timeout": self._config.timeout_s,
                                  "max_retries": 0}
        if provider not in _OPENAI_SHAPED:
            kwargs["model"] = model
        if self._config.api_base:
            kwargs["api_base"] = self._config.api_base
        if self._config.api_key:
            kwargs["api_key"] = self._config.api_key
        return kwargs

    def line_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The body the online call would send for ``request``."""
        online = self._judge._call_kwargs(request)
        body = {k: v for k, v in online.items() if k not in _NOT_BODY}
        body["model"] = self._provider(online["model"])[0]
        if isinstance(body.get("response_format"), type):  # providers converting it themselves
            body["response_format"] = type_to_response_format_param(body["response_format"])
        return body

    def _line(self, custom_id: str, request: JudgeRequest) -> bytes:
        return (json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT_ENDPOINT,
                            "body": self.line_body(request)}) + "\n").encode()

    def pack(self, lines: list[tuple[str, JudgeRequest]]) -> list[list[tuple[str, JudgeRequest]]]:
        """``lines`` split into as few batches as the limits allow: one model per
        batch (in the order each model first appears), each within ``max_lines``
        and ``max_bytes``."""
        by_model: dict[str, list[tuple[str, JudgeRequest]]] = {}
        for item in lines:
            by_model.setdefault(self._judge.model_of(item[1]), []).append(item)
        packed: list[list[tuple[str, JudgeRequest]]] = []
        for items in by_model.values():
            current, size = [], 0
            for item in items:
                length = len(self._line(*item))
                if length > self.max_bytes:
                    raise ValueError(f"request {item[0]!r} alone is {length} bytes, over a batch file's {self.max_bytes}")
                if current and (len(current) == self.max_lines or size + length > self.max_bytes):
                    packed.append(current)
                    current, size = [], 0
                current.append(item)
                size += length
            packed.append(current)
        return packed

    def _error(self, exc: Exception, model: str) -> JudgeError:
        return _translate(exc, model=model, api_key=self._judge._secrets, timeout_s=self._config.timeout_s)

    async def submit(self, lines: list[tuple[str, JudgeRequest]], metadata: dict[str, str] | None = None) -> str:
        """Upload ``lines`` (custom id, request) as one file and create its batch;
        the batch id. Every request must ask the same model."""
        if not lines:
            raise ValueError("a batch needs at least one line")
        models = {self._judge.model_of(request) for _, request in lines}
        if len(models) != 1:
            raise ValueError(f"one batch asks one model, not {sorted(models)}")
        model = models.pop()
        _, provider = self._provider(model)
        data = b"".join(self._line(custom_id, request) for custom_id, request in lines)
        if len(lines) > self.max_lines or len(data) > self.max_bytes:
            raise ValueError(f"{len(lines)} requests, {len(data)} bytes: over a batch file's limits "
                             f"({self.max_lines}, {self.max_bytes} bytes); pack() them")
        kwargs = self._kwargs(provider, model)
        try:
            uploaded = await litellm.acreate_file(
                file=(f"judgeflow-{uuid.uuid4().hex[:12]}.jsonl", data, "application/jsonl"),
                purpose="batch", **kwargs)
            batch = await litellm.acreate_batch(
                completion_window=COMPLETION_WINDOW, endpoint=CHAT_ENDPOINT, input_file_id=uploaded.id,
                metadata=dict(metadata or {}), **kwargs)
        except Exception as exc:
            raise self._error(exc, model) from None
        return str(batch.id)

    async def find(self, key: str, value: str, since: float, model: str | None = None) -> str | None:
        """The id of the batch (of ``model``; None: the judge's) created at ``since`` (epoch s) or later whose
        metadata says ``key``: ``value``; None: none. Pages through the provider's list of batches, newest
        first, no further back than ``since``."""
        model = model or self._config.model
        provider = self._provider(model)[1]
        if provider not in _accepted(litellm.alist_batches):  # a batch it cannot look up: sent again, as before
            log.warning("litellm cannot list the batches of provider %r: the batch of intent %s=%s is not "
                        "looked for (if it was created, its lines are paid for twice)", provider, key, value)
            return None
        kwargs = self._kwargs(provider, model)
        after = None
        try:
            while True:
                page = await litellm.alist_batches(after=after, limit=_LIST_PAGE, **kwargs)
                batches = list(getattr(page, "data", None) or [])
                for batch in batches:
                    if batch.created_at >= since and (getattr(batch, "metadata", None) or {}).get(key) == value:
                        return str(batch.id)
                if not batches or not getattr(page, "has_more", False) or batches[-1].created_at < since:
                    return None
                after = batches[-1].id
        except Exception as exc:
            raise self._error(exc, model) from None

    async def retrieve(self, batch_id: str, model: str | None = None) -> BatchStatus:
        """Where batch ``batch_id`` (of ``model``; None: the judge's) stands."""
        model = model or self._config.model
        try:
            batch = await litellm.aretrieve_batch(batch_id=batch_id, **self._kwargs(self._provider(model)[1], model))
        except Exception as exc:
            raise self._error(exc, model) from None
        return _status_of(batch)

    async def cancel(self, batch_id: str, model: str | None = None) -> BatchStatus:
        """Ask the provider to cancel ``batch_id``; lines it already answered stay in its output."""
        model = model or self._config.model
        try:
            batch = await litellm.acancel_batch(batch_id=batch_id, **self._kwargs(self._provider(model)[1], model))
        except Exception as exc:
            raise self._error(exc, model) from None
        return _status_of(batch)

    async def online_attempt(self, request: JudgeRequest, call: "Call") -> "JudgeReply | AttemptFailed":
        """One attempt of ``request`` as the online judge sends it (its slots, its gate, its price)."""
        return await self._judge.attempt(request, call)

    async def _file_lines(self, file_id: str | None, model: str) -> list[dict]:
        if not file_id:
            return []
        try:
            content = await litellm.afile_content(file_id=file_id, **self._kwargs(self._provider(model)[1], model))
        except Exception as exc:
            raise self._error(exc, model) from None
        return [json.loads(text) for text in content.content.decode("utf-8").splitlines() if text.strip()]

    async def results(self, status: BatchStatus, model: str | None = None) -> dict[str, JudgeReply | JudgeError]:
        """Each line of a finished batch by its custom id: the reply, or the
        typed error. A line in neither file (a batch cancelled before it ran) is absent."""
        model = model or self._config.model
        found: dict[str, JudgeReply | JudgeError] = {}
        for line in await self._file_lines(status.output_file_id, model) + \
                await self._file_lines(status.error_file_id, model):
            found[str(line.get("custom_id"))] = self._line_result(line, model)
        return found

    def _line_result(self, line: dict, model: str) -> JudgeReply | JudgeError:
        where = f"judge {model} (batch)"
        response, error = line.get("response") or {}, line.get("error")
        status = response.get("status_code")
        body = response.get("body")
        if status == 200 and isinstance(body, dict):
            try:
                return self.batch_reply(body, model)
            except Exception as exc:  # noqa: BLE001 - a body litellm cannot read is the provider's fault
                return _status_error(200, self._detail(f"{type(exc).__name__}: {exc}"), where)
        if isinstance(status, int):
            detail = (body or {}).get("error", {}).get("message") if isinstance(body, dict) else body
            return _status_error(status, self._detail(detail), where)
        code = (error or {}).get("code") or "error"
        err = TransientJudgeError(f"{where}: not run ({code}): {self._detail((error or {}).get('message'))}")
        err.batch_code = code  # type: ignore[attr-defined]
        return err

    def _detail(self, text: Any) -> str:
        return " ".join(_scrub(str(text or ""), self._judge._secrets).split())[:300]

    # ---- the price --------------------------------------------------------------------

    def batch_reply(self, completion: dict, model: str) -> JudgeReply:
        """An output line's completion as the online path builds its reply, priced at the batch rate."""
        response = litellm.ModelResponse(**completion)
        reply = self._judge._reply(response, 0.0, model)
        return replace(reply, cost_usd=self.line_cost(reply.prompt_tokens, reply.completion_tokens,
                                                      reply.cost_usd, model))

    def line_cost(self, prompt_tokens: int | None, completion_tokens: int | None, online_cost: float | None,
                  model: str) -> float | None:
        """A batch line's cost: prices configured for the judge's own model
        times the batch discount; else litellm's batch prices for ``model``;
        else the online cost times the batch discount; None unpriced."""
        configured = self._config.prices_per_mtok is not None and model == self._config.model
        per_token = None if configured else model_batch_prices(model)
        if per_token is not None and isinstance(prompt_tokens, int) and isinstance(completion_tokens, int):
            return usage_cost((per_token[0] * 1_000_000, per_token[1] * 1_000_000), prompt_tokens, completion_tokens)
        return None if online_cost is None else online_cost * self.batch_discount
