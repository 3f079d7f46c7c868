"""The production judge: any model litellm can reach (the only module importing litellm, with
its batch calls, :mod:`judgeflow.judge.litellm_batches`, which reuse what is built here).

Behaviour, decided here once for every metric:

* **No network at import.** ``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set (unless
  already set; :data:`ENVIRONMENT_DEFAULTS`) before litellm is imported; otherwise litellm fetches its
  price map from GitHub at import, with retries and sleeps when offline.
* **One retry loop: ours.** :meth:`LiteLLMJudge.acomplete` runs the only
  loop over attempts, :func:`judgeflow.judge.retry.send_with_retries`, over
  :meth:`LiteLLMJudge.attempt` (a judge worker process runs single attempts
  for the run's loop); ``complete`` runs it on the judge's own event loop.
  Every call passes ``num_retries=0`` *and* ``max_retries=0``:
  otherwise the OpenAI client underneath litellm retries 429/5xx on its own,
  which would multiply with this loop and hide from the concurrency bound.
* **Every attempt sent is spend** (:mod:`judgeflow.judge.spend`): the reply
  carries what all the call's attempts cost (``calls``, ``cost_usd``), an
  attempt that timed out or failed after it was sent counted at its
  estimate; a call that fails carries the same on its error's ``billed``.
* **Backoff** and ``Retry-After`` (seconds or an HTTP date, read here) are the
  policy's (:class:`judgeflow.judge.retry.CallRetry`); a ``Retry-After`` also
  starts a cool-down shared by every call on this instance
  (:class:`judgeflow.judge.retry.Pace`).
* **What is retried.** 429, 408/409/425, 5xx (including a malformed 200 body,
  which litellm reports as a 500), connection errors and timeouts. Everything
  else (400, 401, 403, 404, 422, context window exceeded, content policy,
  unsupported params, unknown models, unexpected errors) raises
  :class:`PermanentJudgeError` at once. Classification uses the HTTP status,
  not litellm's class: litellm maps a 403 to ``litellm.APIError`` (not
  ``PermissionDeniedError``) and a 404 to ``BadRequestError``.
* **No litellm exception escapes**, and error messages never contain the API
  key: auth errors carry no server text at all (OpenAI's 401 echoes the key),
  other server text is scrubbed (:mod:`judgeflow.config.scrub`) of the key, the base
  URL's credentials, every configured secret, credentials inside any URL and
  key-like tokens, and the litellm exception is not chained for HTTP errors.
  ``repr`` shows the base URL with its credentials masked.
* **Concurrency.** One :class:`~judgeflow.judge.wire_slots.CallSlots` of
  ``max_concurrency`` owned by the instance bounds HTTP attempts in flight;
  it is held only during an attempt, never during backoff sleeps, and a freed
  slot goes at once to the waiting call of the lowest priority
  (the :class:`~judgeflow.judge.send_gate.Call` the caller hands in), then
  the longest waiter. On an OpenAI-compatible model
  through litellm's own HTTP handler and aiohttp transport (the defaults,
  :func:`_wire_bound`), the slot is held **on the wire only**: from the
  request's send to its reply's last byte (a
  :class:`~judgeflow.judge.wire_slots.WireSlotTransport` under a client passed
  to litellm), so litellm's own CPU per call (building the request and
  parsing the reply) overlaps other calls' wire time instead of idling a slot,
  and calls waiting for a slot wait prepared.
  Elsewhere (the OpenAI SDK path, other providers) the slot is held around
  the whole litellm call, as litellm builds those clients itself.
* **The send gate.** Once an attempt holds its slot, and before it is sent,
  the call's gate is asked (:meth:`judgeflow.judge.send_gate.Call.may_send`):
  a call whose pair the run no longer owns is not sent and not billed
  (:class:`~judgeflow.errors.CallWithheld`). This covers calls prepared ahead
  of a free slot and every retry.
* **Latency** (``JudgeReply.latency_s``) is the duration of the successful HTTP
  attempt only: not the wait for a concurrency slot, not earlier failed
  attempts, not backoff sleeps (with the wire bound, from the request's send
  to the end of litellm's call).
* **Cost** is ``litellm.completion_cost`` from the bundled price map; ``None``
  when the model is not priced (e.g. a self-hosted or test model). Prices
  given in the settings (``JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK`` /
  ``..._OUTPUT_COST_PER_MTOK``, passed as ``prices_per_mtok``) win over the map.
  Cached prompt tokens (:func:`cached_prompt_tokens`) are priced at the map's
  cached rate by litellm, and at ``JUDGEFLOW_JUDGE_CACHED_INPUT_COST_PER_MTOK``
  (``cached_price_per_mtok``; unset: the prompt price) with configured prices.
* **A metric's own model.** A request that names a model
  (:attr:`~judgeflow.judge.base.JudgeRequest.model`) asks that model on the
  same endpoint with the same key, slots, retry loop and cool-down; its
  replies carry that model and are priced from the map for it (the configured
  prices are the judge's own model's).
"""

from __future__ import annotations

from judgeflow.judge.litellm_env import ENVIRONMENT_DEFAULTS, apply_environment_defaults

apply_environment_defaults()  # before litellm is imported

import asyncio  # noqa: E402
import atexit  # noqa: E402
import functools  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

import litellm  # noqa: E402
import httpx  # noqa: E402  (litellm's own dependency: its connection errors)
import openai  # noqa: E402  (litellm's own dependency; its errors can surface through litellm)
from litellm.llms.base_llm.base_utils import type_to_response_format_param  # noqa: E402
from litellm.llms.base_llm.chat.transformation import BaseConfig  # noqa: E402
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler, get_ssl_configuration  # noqa: E402
from litellm.secret_managers.main import get_secret_bool  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from judgeflow.errors import CallWithheld, JudgeError, PermanentJudgeError, TransientJudgeError  # noqa: E402
from judgeflow.judge.base import JudgeBase, JudgeReply, JudgeRequest  # noqa: E402
from judgeflow.judge.retry import AttemptFailed, CallRetry, Pace, send_with_retries  # noqa: E402
from judgeflow.judge.send_gate import ANY_CALL, Call  # noqa: E402
from judgeflow.judge.spend import CallSpend, usage_cost  # noqa: E402
from judgeflow.judge.wire_slots import CallSlots, WireSlotTransport, attempt_ticket  # noqa: E402
from judgeflow.judge.retry_after import parse_retry_after  # noqa: E402
from judgeflow.config.scrub import has_credentials, scrub, scrub_url, url_credentials  # noqa: E402

# litellm's documented switch for what it prints itself (its "Give Feedback / Get Help" banner
# on every failed call, "Provider List" on an unknown model): raw print() calls on stdout with
# colour codes, around errors this adapter already reports. A setting of litellm's configuration,
# the one assignment to litellm that tests/judgeflow/test_imports.py allows. Its debug output is
# off already: LITELLM_LOG (judgeflow.judge.litellm_env) sets its log level.
litellm.suppress_debug_info = True

if TYPE_CHECKING:
    from judgeflow.judge.config import JudgeConfig


__all__ = [
    "ENVIRONMENT_DEFAULTS",
    "LiteLLMJudge",
    "apply_environment_defaults",
    "cached_prompt_tokens",
    "completion_cost_usd",
    "model_batch_prices",
    "model_cached_price",
    "model_prices",
]

WARM_UP_TIMEOUT_S = 5.0


class _WarmUp(BaseModel):
    """The response format of :meth:`LiteLLMJudge.warm_up`'s canned call."""

    ok: bool


_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
_MAX_DETAIL_CHARS = 300


# --------------------------------------------------------------------------
# pure helpers (unit-tested directly)
# --------------------------------------------------------------------------


def completion_cost_usd(response: Any) -> float | None:
    """USD cost of a litellm response from the bundled price map; ``None`` when
    the model is not priced or the response lacks usage.

    litellm already prices every response it returns (``_hidden_params
    ["response_cost"]``, with the same price map, ``None`` when unpriced); that
    figure is used when present instead of pricing the response a second time."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        cost = hidden["response_cost"]
        if cost is None:
            return None
    else:
        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception:  # ModelNotMappedError, BadRequestError(unknown provider), ...
            return None
    try:
        cost = float(cost)
    except (TypeError, ValueError):
        return None
    if math.isnan(cost) or cost < 0:
        return None
    return cost


def cached_prompt_tokens(usage: Any) -> int | None:
    """The prompt tokens a provider served from its prompt cache, as litellm's
    usage carries them: OpenAI's ``prompt_tokens_details.cached_tokens``, else
    Anthropic's ``cache_read_input_tokens``; None when the usage says neither."""
    details = getattr(usage, "prompt_tokens_details", None)
    for value in (getattr(details, "cached_tokens", None), getattr(usage, "cache_read_input_tokens", None)):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _map_prices(model: str, *keys: str) -> tuple[float, ...] | None:
    """The prices ``keys`` name in ``model``'s entry of litellm's bundled price
    map (USD per token); None when the model or any of them is not there."""
    try:
        info = litellm.get_model_info(model)
    except Exception:  # ModelNotMappedError and friends
        return None
    prices = tuple(info.get(key) for key in keys)
    if any(not isinstance(p, (int, float)) or p < 0 for p in prices):
        return None
    return tuple(float(p) for p in prices)


def model_prices(model: str) -> tuple[float, float] | None:
    """(USD per prompt token, USD per completion token) from litellm's bundled
    price map; None when the model is not in it."""
    return _map_prices(model, "input_cost_per_token", "output_cost_per_token")  # type: ignore[return-value]


def model_batch_prices(model: str) -> tuple[float, float] | None:
    """(USD per prompt token, USD per completion token) of ``model``'s batch API
    from litellm's bundled price map; None when the map has no batch prices for
    it (the caller then applies the configured batch discount to the online price)."""
    return _map_prices(model, "input_cost_per_token_batches",  # type: ignore[return-value]
                       "output_cost_per_token_batches")


def model_cached_price(model: str) -> float | None:
    """USD per prompt token served from the provider's prompt cache
    (``cache_read_input_token_cost`` in litellm's map); None when the map has none."""
    price = _map_prices(model, "cache_read_input_token_cost")
    return None if price is None else price[0]


def _retry_after_of(exc: BaseException) -> float | None:
    """The server's Retry-After. litellm keeps the provider's headers on
    ``exc.litellm_response_headers``; ``exc.response.headers`` is an empty
    placeholder and ``exc.headers`` is only set by litellm's own proxy."""
    sources = (
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    )
    for headers in sources:
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms") or headers.get("Retry-After-Ms")
            if ms is not None:
                parsed = parse_retry_after(ms)
                if parsed is not None:
                    return parsed / 1000.0
            value = headers.get("retry-after") or headers.get("Retry-After")
        except Exception:
            continue
        parsed = parse_retry_after(value)
        if parsed is not None:
            return parsed
    return None


_LITELLM_PREFIX = re.compile(
    r"^\s*(?:litellm\.)?(?:[A-Za-z]+(?:Error|Exception|Timeout)|OpenAIException)\s*(?::|-)\s*"
)
def _scrub(text: str, secrets: str | tuple[str, ...] | None) -> str:
    """Without the key, the credentials of the base URL, any registered secret,
    URL credentials and key-shaped tokens (:mod:`judgeflow.config.scrub`)."""
    extra = (secrets,) if isinstance(secrets, str) else (secrets or ())
    return scrub(text, extra)


def _detail(exc: BaseException, api_key: str | tuple[str, ...] | None) -> str:
    """The server's message, without litellm's class-name prefixes, scrubbed and clipped."""
    text = str(getattr(exc, "message", None) or exc or type(exc).__name__)
    for _ in range(6):
        stripped = _LITELLM_PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = " ".join(_scrub(text, api_key).split())
    if len(text) > _MAX_DETAIL_CHARS:
        text = text[: _MAX_DETAIL_CHARS - 3] + "..."
    return text or type(exc).__name__


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def _translate(exc: Exception, *, model: str, api_key: str | tuple[str, ...] | None, timeout_s: float) -> JudgeError:
    """Map anything litellm (or the OpenAI client under it) raised onto our errors."""
    where = f"judge {model}"
    status = _status_of(exc)

    if isinstance(exc, (litellm.Timeout, openai.APITimeoutError)):
        return _tag(TransientJudgeError(f"{where}: timed out after {timeout_s:g}s"), status, exc)
    if _never_connected(exc):
        # litellm reports some of these as a 500 that no server sent
        return _tag(TransientJudgeError(f"{where}: could not connect: {_detail(exc, api_key)}"), None, exc)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return _tag(PermanentJudgeError(
            f"{where}: context window exceeded (HTTP 400): {_detail(exc, api_key)}"
        ), status, exc)
    if isinstance(exc, litellm.ContentPolicyViolationError):
        return _tag(PermanentJudgeError(
            f"{where}: request rejected by the provider's content policy (HTTP 400): {_detail(exc, api_key)}"
        ), status, exc)
    if isinstance(exc, (litellm.RateLimitError, openai.RateLimitError)) or status == 429:
        retry_after = _retry_after_of(exc)
        hint = f", Retry-After {retry_after:g}s" if retry_after is not None else ""
        return _tag(TransientJudgeError(
            f"{where}: rate limited (HTTP 429{hint}): {_detail(exc, api_key)}", retry_after_s=retry_after
        ), 429, exc)
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError,
                        openai.AuthenticationError, openai.PermissionDeniedError)) or status in (401, 403):
        code = status if status in (401, 403) else 401
        # No server text: OpenAI's 401 message echoes the key that was sent.
        return _tag(PermanentJudgeError(
            f"{where}: authentication or permission failed (HTTP {code}); check the judge API key, "
            "api_base and the key's access to this model"
        ), code, exc)
    if isinstance(exc, (litellm.APIConnectionError, openai.APIConnectionError)) and not (
        status is not None and 400 <= status < 500
    ):
        return _tag(TransientJudgeError(f"{where}: connection failed: {_detail(exc, api_key)}"), status, exc)
    if status is not None and 200 <= status < 300:
        # a 200 whose body is not a chat completion (an HTML error page from a
        # proxy, a truncated body): litellm's own HTTP handler reports it this way
        return _tag(TransientJudgeError(
            f"{where}: unreadable response body (HTTP {status}): {_detail(exc, api_key)}"
        ), status, exc)
    if status is not None and (status >= 500 or status in _TRANSIENT_STATUSES):
        retry_after = _retry_after_of(exc)
        return _tag(TransientJudgeError(
            f"{where}: server error (HTTP {status}): {_detail(exc, api_key)}", retry_after_s=retry_after
        ), status, exc)
    if status is not None and 400 <= status < 500:
        label = {404: "model or endpoint not found", 422: "request not processable"}.get(status, "bad request")
        return _tag(PermanentJudgeError(
            f"{where}: {label} (HTTP {status}): {_detail(exc, api_key)}"
        ), status, exc)
    if isinstance(exc, (litellm.ServiceUnavailableError, litellm.InternalServerError, litellm.BadGatewayError)):
        return _tag(TransientJudgeError(f"{where}: server error: {_detail(exc, api_key)}"), status, exc)
    return _tag(PermanentJudgeError(
        f"{where}: unexpected {type(exc).__name__}: {_detail(exc, api_key)}"
    ), status, exc)


def _reached_provider(err: JudgeError, exc: BaseException, marks: list[float] | None) -> bool:
    """Whether a failed attempt's request reached the provider, which bills it.
    A connection that never opened did not; a timeout, a connection dropped
    after it opened, a 5xx or an unreadable 200 did. Rate limits (429) and
    other refusals are not billed. ``marks``: the times the wire-bound
    transport took the request (empty: it never got that far); None when
    litellm's own client carried it."""
    if _never_connected(exc) or (marks is not None and not marks):
        return False
    if isinstance(exc, (litellm.Timeout, openai.APITimeoutError)):
        return True
    status = getattr(err, "status_code", None)
    if isinstance(err, PermanentJudgeError) or status in _TRANSIENT_STATUSES:
        return False
    return isinstance(err, TransientJudgeError)


def _never_connected(exc: BaseException) -> bool:
    """A connection refused or not opened in time, anywhere in the error's chain."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, ConnectionRefusedError)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _tag(err: JudgeError, status: int | None, exc: BaseException) -> JudgeError:
    err.status_code = status  # type: ignore[attr-defined]
    err.original_type = f"{type(exc).__module__}.{type(exc).__name__}"  # type: ignore[attr-defined]
    return err


def _is_http_error(exc: BaseException) -> bool:
    return isinstance(exc, (openai.APIError, litellm.Timeout)) or _status_of(exc) is not None


# pydantic class -> its response_format dict (see LiteLLMJudge._response_format)
_SCHEMA_DICTS: dict[type, dict] = {}


@functools.lru_cache(maxsize=64)
def _passes_schema_dicts(model: str, api_base: str | None) -> bool:
    """Whether litellm's config for ``model`` converts response formats with the
    default ``type_to_response_format_param`` (dicts then pass through as they are)."""
    try:
        _, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base)
        config = litellm.ProviderConfigManager.get_provider_chat_config(
            model=model, provider=litellm.LlmProviders(provider)
        )
    except Exception:
        return False
    if config is None:
        return True
    method = getattr(type(config), "get_json_schema_from_pydantic_object", None)
    return method is BaseConfig.get_json_schema_from_pydantic_object


_clients_to_close: list[AsyncHTTPHandler] = []


def _close_at_exit(client: AsyncHTTPHandler) -> None:
    """Close ``client`` when the process exits, as litellm does with the clients
    it caches: an aiohttp session left open prints "Unclosed client session"
    when it is collected. Kept referenced until then (a client outliving its
    event loop is a few kB; a process has one loop per judge in production)."""
    if not _clients_to_close:
        atexit.register(_close_clients)
    _clients_to_close.append(client)


def _close_clients() -> None:
    async def close_all() -> None:
        for client in _clients_to_close:
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - at exit, a client that cannot close is left to the OS
                pass

    loop = asyncio.new_event_loop()  # the clients' own loops are usually closed by now
    try:
        loop.run_until_complete(close_all())
    finally:
        loop.close()
    _clients_to_close.clear()


# --------------------------------------------------------------------------
# the judge
# --------------------------------------------------------------------------


class LiteLLMJudge(JudgeBase):
    """A :class:`~judgeflow.judge.base.Judge` over ``litellm.completion``."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60,
        retry: CallRetry = CallRetry(),
        max_concurrency: int = 8,
        extra_kwargs: dict | None = None,
        prices_per_mtok: tuple[float, float] | None = None,
        cached_price_per_mtok: float | None = None,
        pace: Pace | None = None,
        metric_models: tuple[str, ...] = (),
    ):
        if not model:
            raise ValueError("model is required")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        super().__init__()
        self._model = model
        self._api_base = api_base or None
        self._api_key = api_key or None
        # what error texts must never show: the key and the base URL's credentials
        self._secrets = tuple(
            v for v in (self._api_key, *url_credentials(self._api_base),
                        self._api_base if has_credentials(self._api_base) else None) if v
        )
        self.timeout_s = float(timeout_s)
        self.retry = retry
        self.max_concurrency = int(max_concurrency)
        self._extra_kwargs = dict(extra_kwargs or {})
        self._prices_per_mtok = prices_per_mtok
        # USD per million cached prompt tokens at the configured prices; None: the prompt price
        self._cached_price_per_mtok = cached_price_per_mtok
        self._pace = pace or Pace()  # the backoff's randomness and the Retry-After cool-down
        self._slots = CallSlots(self.max_concurrency)
        # the wire-bound HTTP client per event loop (litellm's clients are per loop too)
        self._wire_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._wire_providers: dict[str, bool] = {}  # model -> whether its provider allows it; checked once
        self._map_prices: dict[str, tuple[float, float] | None] = {}  # model -> its price map prices
        self.metric_models = tuple(metric_models)  # the models requests may name besides the judge's own

    @classmethod
    def from_config(cls, config: "JudgeConfig") -> "LiteLLMJudge":
        return cls(
            config.model, api_base=config.api_base, api_key=config.api_key, timeout_s=config.timeout_s,
            retry=config.retry, max_concurrency=config.max_concurrency,
            prices_per_mtok=config.prices_per_mtok, cached_price_per_mtok=config.cached_price_per_mtok,
            metric_models=config.metric_models,
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def api_base(self) -> str | None:
        return self._api_base

    def __repr__(self) -> str:  # never shows the key, nor credentials inside the base URL
        base = scrub_url(self._api_base) if self._api_base else None
        return f"LiteLLMJudge(model={self._model!r}, api_base={base!r}, max_concurrency={self.max_concurrency})"

    # ---- the call -----------------------------------------------------------

    def model_of(self, request: JudgeRequest) -> str:
        """The model ``request`` asks: its own (a metric's judge model), else the judge's."""
        return request.model or self._model

    def _response_format(self, response_format: Any, model: str) -> Any:
        """The wire form of a pydantic ``response_format``, built once per class.

        litellm turns a pydantic class into a JSON schema on *every* call
        (``to_strict_json_schema``, CPU a run pays per call). For
        providers whose config uses litellm's default conversion, a dict is
        passed through unchanged, so converting once with that same function
        sends byte-identical requests. Providers with their own conversion
        (Anthropic, Gemini/Vertex, Databricks) keep getting the class."""
        if not (isinstance(response_format, type) and _passes_schema_dicts(model, self._api_base)):
            return response_format
        converted = _SCHEMA_DICTS.get(response_format)
        if converted is None:
            converted = type_to_response_format_param(response_format)
            _SCHEMA_DICTS[response_format] = converted
        return converted

    def _call_kwargs(self, request: JudgeRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"temperature": 0}
        kwargs.update(self._extra_kwargs)
        model = self.model_of(request)
        kwargs.update(
            model=model,
            messages=list(request.messages),
            response_format=self._response_format(request.response_format, model),
            timeout=self.timeout_s,
            # Our loop owns retries: neither litellm nor the OpenAI client may retry.
            num_retries=0,
            max_retries=0,
        )
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        return kwargs

    def _reply(self, response: Any, latency_s: float, model: str) -> JudgeReply:
        content = ""
        try:
            content = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            content = ""
        usage = getattr(response, "usage", None)
        cached = cached_prompt_tokens(usage)
        return JudgeReply(
            content=content if isinstance(content, str) else str(content),
            model=model,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cached_tokens=cached,
            cost_usd=self._cost(response, usage, model, cached),
            latency_s=latency_s,
        )

    def _cost(self, response: Any, usage: Any, model: str, cached: int | None) -> float | None:
        if self._prices_per_mtok is None or model != self._model:
            return completion_cost_usd(response)  # litellm prices cached tokens at the map's cached rate
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return None  # no usage reported: unknown, not free
        return usage_cost(self._prices_per_mtok, prompt, completion, cached or 0, self._cached_price_per_mtok)

    def _error(self, exc: Exception, model: str) -> JudgeError:
        return _translate(exc, model=model, api_key=self._secrets, timeout_s=self.timeout_s)

    async def acomplete(self, request: JudgeRequest, call: Call | None = None) -> JudgeReply:
        """The call: attempts (:meth:`_attempt`) in the one retry loop,
        :func:`~judgeflow.judge.retry.send_with_retries`, each sent only once
        ``call``'s gate allows it; every attempt sent is counted
        (:class:`~judgeflow.judge.spend.CallSpend`) on the reply or the error."""
        kwargs, client = self._prepared(request)
        spend = CallSpend(kwargs["model"], self.estimate_prices(kwargs["model"]), request)
        call = call or ANY_CALL
        return await send_with_retries(lambda: self._attempt(kwargs, client, call), policy=self.retry,
                                       spend=spend, pace=self._pace, permits=call.permits)

    async def attempt(self, request: JudgeRequest, call: Call) -> JudgeReply | AttemptFailed:
        """One attempt of ``request``, for a retry loop run elsewhere (a judge
        worker's run): the reply as it came, or how it failed."""
        kwargs, client = self._prepared(request)
        return await self._attempt(kwargs, client, call)

    def _prepared(self, request: JudgeRequest) -> tuple[dict, AsyncHTTPHandler | None]:
        kwargs = self._call_kwargs(request)
        client = self._wire_client(kwargs["model"])
        if client is not None:
            kwargs["client"] = client
        return kwargs, client

    async def _attempt(self, kwargs: dict, client: AsyncHTTPHandler | None, call: Call
                       ) -> JudgeReply | AttemptFailed:
        """One attempt holding a slot: the reply, or how it failed. The send
        gate is asked once the slot is held: by the wire-bound transport, else here."""
        wired = client is not None
        model = kwargs["model"]
        if not wired:
            await self._slots.acquire_async(call.priority)
        try:
            with attempt_ticket(call) as ticket:
                started = time.perf_counter()
                try:
                    if not wired and not await call.may_send():
                        return AttemptFailed(self._withheld(model))
                    response = await litellm.acompletion(**kwargs)
                except Exception as exc:
                    if ticket.refused:
                        return AttemptFailed(self._withheld(model))
                    err = self._error(exc, model)
                    return AttemptFailed(err, exc, _reached_provider(err, exc, ticket.marks if wired else None),
                                         chain=not _is_http_error(exc))
            return self._reply(response, time.perf_counter() - (ticket.marks[-1] if ticket.marks else started), model)
        finally:
            if not wired:
                self._slots.release()

    def _withheld(self, model: str) -> CallWithheld:
        return CallWithheld(f"judge {model}: not sent, the run no longer owns the pair")

    def estimate_prices(self, model: str | None = None) -> tuple[float, float] | None:
        """USD per million (prompt, completion) tokens of ``model`` (None: the
        judge's own) for attempts without usage: the configured prices for the
        judge's own model, else litellm's price map; None unpriced."""
        model = model or self._model
        if self._prices_per_mtok is not None and model == self._model:
            return self._prices_per_mtok
        if model not in self._map_prices:
            per_token = model_prices(model)
            self._map_prices[model] = None if per_token is None else (per_token[0] * 1e6, per_token[1] * 1e6)
        return self._map_prices[model]

    def prices_by_model(self) -> dict[str, tuple[float, float] | None]:
        """:meth:`estimate_prices` of the judge's own model and of each model its metrics ask."""
        return {model: self.estimate_prices(model) for model in (self._model, *self.metric_models)}

    def _wire_client(self, model: str) -> AsyncHTTPHandler | None:
        """The running loop's wire-bound client, or None where the slot must be
        held around the whole litellm call (see the module doc)."""
        if not self._wire_bound(model):
            return None
        loop = asyncio.get_running_loop()
        client = self._wire_clients.get(loop)
        if client is None:
            ssl = get_ssl_configuration(None)
            inner = AsyncHTTPHandler.create_async_transport(
                ssl_context=ssl if not isinstance(ssl, bool) else None,
                ssl_verify=ssl if isinstance(ssl, bool) else None,
            )
            client = AsyncHTTPHandler(timeout=self.timeout_s, transport=WireSlotTransport(inner, self._slots))
            self._wire_clients[loop] = client
            _close_at_exit(client)
        return client

    def _wire_bound(self, model: str) -> bool:
        """Whether this call goes through litellm's own HTTP handler on its
        aiohttp transport, which take a client from the caller: an
        OpenAI-compatible model with litellm's defaults (both switches are read
        on every call, as litellm reads them). The aiohttp transport finds
        proxies itself; litellm's httpx transport needs mounts only litellm sets."""
        if model not in self._wire_providers:
            try:
                provider = litellm.get_llm_provider(model=model, api_base=self._api_base)[1]
            except Exception:  # noqa: BLE001 - the call itself will say what is wrong
                provider = None
            self._wire_providers[model] = provider == "openai"
        return (self._wire_providers[model] and bool(get_secret_bool("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"))
                and AsyncHTTPHandler.should_use_aiohttp_transport())

    async def warm_up(self) -> bool:
        """One call through litellm with a canned reply (``mock_response``: no
        request leaves the process, no tokens, no cost), so the first real call
        does not pay litellm's lazy set-up: schemas its types build on first
        use, the response and cost machinery. Never raises: False when litellm
        refused (the first real call then sets up as before)."""
        kwargs = self._call_kwargs(JudgeRequest(
            step="warm-up", messages=[{"role": "user", "content": "warm-up"}], response_format=_WarmUp,
        ))
        kwargs["mock_response"] = '{"ok": true}'
        try:
            await asyncio.wait_for(litellm.acompletion(**kwargs), WARM_UP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a warm-up that fails changes nothing
            return False
        return True
