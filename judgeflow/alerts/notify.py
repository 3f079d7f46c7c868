"""Where alert notifications go: a Prefect event, a generic signed webhook, Slack.

Every channel is best effort within one evaluation: a channel's failure is
returned as a :class:`ChannelResult`, never raised, so a delivery problem never
fails the scoring run. HTTP channels retry with exponential backoff on 5xx,
408, 425, 429, timeouts and connection errors, a bounded number of times; what is
still undelivered after that stays in the outbox (:mod:`judgeflow.alerts.outbox`)
and is tried again by every later evaluation. Any other 4xx is permanent: not
retried, and the outbox marks the delivery dead. Every request's timeout is cut
to what is left of the evaluation's delivery time budget
(``JUDGEFLOW_ALERT_DELIVERY_BUDGET_S``); a retry that would not fit is not made.

Webhook requests carry

- ``X-Judgeflow-Event``: ``judgeflow.alert.fired`` or ``judgeflow.alert.resolved``
- ``X-Judgeflow-Delivery``: the notification's delivery id (a UUID, also the
  payload's ``delivery_id``), the same on every attempt and every later
  redelivery: receivers de-duplicate on it
- ``X-Judgeflow-Timestamp``: Unix seconds of this attempt
- ``X-Judgeflow-Signature``: ``sha256=<hex>``, HMAC-SHA256 with
  ``JUDGEFLOW_ALERT_WEBHOOK_SECRET`` over ``<timestamp>.<delivery id>.<raw body>``
  (only when a secret is set): the id receivers de-duplicate on is signed too

A Prefect event's id is the delivery id too, so a re-sent event is the same event
(the Prefect API stores an event id once). An event counts as delivered only
once the Prefect API returns it when asked for its id (:meth:`Notifier.confirm_events`):
``emit_event`` only queues it for a background sender.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal
from uuid import UUID

import httpx

from judgeflow import __version__
from judgeflow.alerts.evaluation import iso_utc
from judgeflow.alerts.lifecycle import rate_used
from judgeflow.judge.retry_after import parse_retry_after
from judgeflow.config.scrub import scrub, without_endpoint_path
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import unit_of

if TYPE_CHECKING:
    from judgeflow.alerts.evaluation import Figures
    from judgeflow.alerts.rules import Rule
    from judgeflow.alerts.state import Decision

log = logging.getLogger("judgeflow.alerts")

EVENT_FIRED = "judgeflow.alert.fired"
EVENT_RESOLVED = "judgeflow.alert.resolved"
SIGNATURE_HEADER = "X-Judgeflow-Signature"
TIMESTAMP_HEADER = "X-Judgeflow-Timestamp"
EVENT_HEADER = "X-Judgeflow-Event"
DELIVERY_HEADER = "X-Judgeflow-Delivery"
RETRYABLE_STATUS = frozenset({408, 425, 429})
# the order channels are listed and reported in
CHANNELS = ("prefect_event", "webhook", "slack")

# delivered: the channel confirmed it; failed: it did not (retried later);
# skipped: the channel is off, for good; sent: a Prefect event emitted, delivered
# once the API confirms it; deferred: not attempted here (no Prefect API, or the
# evaluation's delivery time budget is spent): left pending, not a failed try
ChannelStatus = Literal["delivered", "failed", "skipped", "sent", "deferred"]


@dataclass
class ChannelResult:
    channel: str
    status: ChannelStatus
    attempts: int = 0
    http_status: int | None = None
    error: str | None = None
    detail: str | None = None
    permanent: bool = False  # a failure retrying cannot fix (a 4xx but 408, 425, 429): the delivery is dead


BUDGET_SPENT = "the evaluation's delivery time budget (JUDGEFLOW_ALERT_DELIVERY_BUDGET_S) is spent"


def _left(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (``time.monotonic()``); None: no limit."""
    return None if deadline is None else deadline - time.monotonic()


# --- the payload ---------------------------------------------------------------


def event_name(decision: "Decision") -> str:
    return EVENT_RESOLVED if decision.transition == "resolved" else EVENT_FIRED


def configured_channels(settings: Settings) -> list[str]:
    """The channels a notification created now is to be delivered to."""
    on = {
        "prefect_event": settings.alert_prefect_events,
        "webhook": settings.alert_webhook_url is not None,
        "slack": settings.alert_slack_webhook_url is not None,
    }
    return [c for c in CHANNELS if on[c]]


def build_payload(decision: "Decision", *, run_url: str | None = None) -> dict[str, Any]:
    """The JSON body of the webhook and the payload of the Prefect event. It is
    stored with the notification and sent unchanged on every redelivery."""
    rule, figures = decision.rule, decision.figures

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    return {
        "event": event_name(decision),
        "notification": decision.transition,  # fired | reminder | resolved
        "delivery_id": decision.delivery_id,
        "alert_id": decision.alert_event_id,
        "rule": rule.name,
        "metric": rule.metric,
        # what the rule's results count: "traces", or "sessions" (a session metric's rule); None: no metric's
        "unit": None if rule.metric is None else unit_of(rule.metric),
        "description": rule.description,
        "kind": rule.kind,  # not_passed_rate | failure_rate | regression
        # {} over all results; {"app": "B"} for one segment ("other": the values
        # outside the rule's top JUDGEFLOW_ALERT_SEGMENT_TOP)
        "segment": figures.segment.as_json(),
        "state": decision.state,
        "rate": rounded(figures.value),
        "baseline_rate": rounded(figures.baseline_value),
        "increase": rounded(figures.increase),
        # one-sided Fisher's exact test of "the window's rate is above the baseline's"
        "p_value": figures.p_value,
        # regression rules: the p-value Holm-adjusted over the segments the rule
        # tested in this evaluation (``tests`` of them), which is what met ``alpha``
        "p_value_adjusted": figures.decision_p if rule.is_regression else None,
        "tests": figures.family_size if rule.is_regression else None,
        "threshold": rule.maximum,  # maximum rules: the maximum rate
        "min_increase": rule.min_increase,  # regression rules: the smallest rise that pages
        "alpha": rule.alpha if rule.is_regression else None,
        "window": rule.window,
        "window_start": iso_utc(figures.window_start),
        "baseline": rule.baseline,
        "baseline_start": iso_utc(figures.baseline_start),
        "evaluated_at": iso_utc(figures.evaluated_at),
        "sample_size": figures.sample_size,
        "violations": figures.violations,
        **sample_fields(figures),
        **corrected_fields(decision.rule, figures),
        "baseline_sample_size": figures.baseline_sample_size,
        "baseline_violations": figures.baseline_violations,
        "failed_count": figures.failed,
        "min_samples": rule.min_samples,
        "opened_at": iso_utc(decision.opened_at),
        "resolved_at": iso_utc(decision.resolved_at),
        "flow_run_id": decision.flow_run_id,
        "run_url": run_url,
        "worst_traces": [w.as_json() for w in figures.worst],
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def sample_fields(figures: "Figures") -> dict[str, Any]:
    """The rate's evidence (judgeflow/alerts/estimates.py): its 95% interval, the
    results judged and the traffic they stand for, the effective sample size the
    minimum-samples check read, and whether the window was sampled (then
    ``violations``/``sample_size`` are judged counts, not the traffic's)."""
    e = figures.estimate
    return {
        "ci_low": _rounded(e.ci_low) if e else None,
        "ci_high": _rounded(e.ci_high) if e else None,
        "judged": figures.sample_size,
        "traffic": round(e.traces) if e else figures.sample_size,
        "effective_n": round(e.n_eff, 1) if e else float(figures.sample_size),
        "sampled": bool(e and e.sampled),
    }


def corrected_fields(rule: "Rule", figures: "Figures") -> dict[str, Any]:
    """The window's corrected rate (judgeflow/alerts/corrected.py) beside the judged ``rate``, and
    which of the two the rule decided on (``rate_on``; ``rate_on_note``: why it fell back to the
    judged rate). Null where the evaluation read no labels for the rule."""
    used, note = rate_used(rule, figures)
    c = figures.corrected
    return {
        "rate_on": used,
        "rate_on_note": note,
        "corrected_rate": _rounded(c.rate) if c else None,
        "corrected_ci_low": _rounded(c.ci_low) if c else None,
        "corrected_ci_high": _rounded(c.ci_high) if c else None,
        "labels": c.labels if c else None,
    }


def _evidence(payload: dict[str, Any]) -> str:
    """How many results the rate rests on; over a sampled window, its interval and the traffic judged."""
    if not payload.get("sampled"):
        return f"{payload['sample_size']} results"
    return (f"95% CI {_pct(payload.get('ci_low'))}-{_pct(payload.get('ci_high'))}, {payload['judged']} judged of "
            f"~{payload['traffic']} {payload.get('unit') or 'traces'}, effective n {payload['effective_n']:g}")


def _adjusted(payload: dict[str, Any]) -> str:
    """What the Slack text adds when the rule tested more than one segment: the Holm-adjusted p."""
    adjusted, tests = payload.get("p_value_adjusted"), payload.get("tests")
    if adjusted is None or not tests or tests < 2:
        return ""
    return f", {adjusted:.2g} Holm-adjusted over {tests} segments"


def with_dead_fired(payload: dict[str, Any], fired: Any) -> dict[str, Any]:
    """``payload`` (a "resolved") as sent on a channel where the "fired" it
    resolves died (``fired``: its ``alert_events`` id, when, and the last error):
    the receiver is told it is closing an alert it never saw open."""
    when = iso_utc(fired.occurred_at)
    return {
        **payload,
        "fired_delivery": {"status": "dead", "notification_id": fired.id, "occurred_at": when,
                           "error": fired.last_error},
        "note": (f"this alert's 'fired' notification ({when}) never reached this channel: its delivery died"
                 + (f" ({fired.last_error})" if fired.last_error else "")
                 + "; this 'resolved' closes an alert this receiver was not told had opened"),
    }


# --- signing ---------------------------------------------------------------------


def sign(secret: str, timestamp: str, body: bytes, *, delivery_id: str) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, ``<timestamp>.<delivery id>.<body>``)."""
    message = timestamp.encode() + b"." + delivery_id.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


_TIMESTAMP = re.compile(r"[0-9]{1,15}")


def verify_signature(
    secret: str, timestamp: str, body: bytes, signature: str, *, delivery_id: str,
    tolerance_s: float | None = 300, now: float | None = None,
) -> bool:
    """What a receiver does: recompute over the timestamp, the delivery id (the
    ``X-Judgeflow-Delivery`` header) and the body, and compare in constant time;
    reject stale timestamps. Returns False - never raises - for anything
    malformed: a timestamp that is not a whole number of seconds (``nan``,
    ``inf``, ``1e9``, ``12.5``, ``-5``), a non-ASCII or non-string signature or
    delivery id, a body that is not bytes."""
    try:
        if not isinstance(timestamp, str) or not _TIMESTAMP.fullmatch(timestamp):
            return False
        if not isinstance(signature, str) or not signature.isascii() or not isinstance(body, (bytes, bytearray)):
            return False
        if not isinstance(delivery_id, str) or not delivery_id.isascii() or "." in delivery_id:
            return False
        if tolerance_s is not None:
            current = time.time() if now is None else now
            if not math.isfinite(current) or abs(current - int(timestamp)) > tolerance_s:
                return False
        return hmac.compare_digest(sign(secret, timestamp, bytes(body), delivery_id=delivery_id), signature)
    except Exception:  # a receiver's check must answer, whatever it was handed
        return False


# --- Slack -------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(payload: dict[str, Any]) -> dict[str, Any]:
    """A readable Slack incoming-webhook message for a notification payload."""
    rule = payload["rule"]
    label = rule.replace("_", " ").capitalize()
    kind = payload["notification"]
    if kind == "resolved":
        head = f":white_check_mark: *judgeflow alert resolved: {rule}*"
        relation = "is back at or below"
    elif kind == "reminder":
        head = f":rotating_light: *judgeflow alert still firing: {rule}*"
        relation = "is above"
    else:
        head = f":rotating_light: *judgeflow alert firing: {rule}*"
        relation = "is above"
    segment = ", ".join(f"{k}={v}" for k, v in (payload.get("segment") or {}).items())
    if segment:
        head = head[:-1] + f" for {_slack_escape(segment)}*"
    if payload.get("kind") == "regression":
        p = payload.get("p_value")
        rise = (
            f"{label}: {_pct(payload['rate'])} over the last {payload['window']} "
            f"({payload['violations']}/{payload['sample_size']}) against {_pct(payload.get('baseline_rate'))} "
            f"in the {payload.get('baseline')} before "
            f"({payload.get('baseline_violations')}/{payload.get('baseline_sample_size')}); "
            f"p = {'n/a' if p is None else f'{p:.2g}'} (one-sided Fisher's exact test){_adjusted(payload)}, "
            f"paging from a rise of {_pct(payload.get('min_increase'))}."
        )
        lines = [head, rise]
    else:
        baseline = (
            f" Baseline ({payload.get('baseline')} before): {_pct(payload.get('baseline_rate'))}."
            if payload.get("baseline_rate") is not None else ""
        )
        lines = [
            head,
            f"{label} {_pct(payload['rate'])} {relation} the maximum {_pct(payload['threshold'])} "
            f"over the last {payload['window']} ({_evidence(payload)}"
            + (f"; {payload['failed_count']} failed scorings not counted" if payload.get("metric") and payload["failed_count"] else "")
            + ")." + baseline,
        ]
    if payload["worst_traces"] and kind != "resolved":
        lines.append(f"Worst {payload.get('unit') or 'traces'}:")
        for w in payload["worst_traces"]:
            score = "" if w["score"] is None else f" ({w['score']:.2f})"
            reason = _slack_escape((w["reason"] or "")[:150])
            lines.append(f"• `{_slack_escape(w['trace_id'])}`{score} {reason}".rstrip())
    if payload.get("note"):
        lines.append(f":warning: {_slack_escape(payload['note'])}")
    if payload.get("run_url"):
        lines.append(f"Flow run: <{payload['run_url']}|{payload['flow_run_id']}>")
    elif payload.get("flow_run_id"):
        lines.append(f"Flow run: `{payload['flow_run_id']}`")
    text = "\n".join(lines)
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


# --- Prefect events ---------------------------------------------------------------

Emitter = Callable[..., Any]


def prefect_api_available() -> bool:
    """True when an event can reach a Prefect API without starting a server
    just for it: an API URL is configured, or we run inside a flow or task run."""
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.settings import get_current_settings

    return bool(get_current_settings().api.url) or FlowRunContext.get() is not None or TaskRunContext.get() is not None


def _prefect_emit(**kwargs: Any) -> Any:
    from prefect.events import emit_event

    return emit_event(**kwargs)


# the API answers at most this many events per page (3.8.8 refuses a larger limit)
_READ_PAGE = 50
_CONFIRM_POLL_S = 0.25


def _prefect_confirm(ids: list[str], deadline: float) -> set[str]:
    """The event ids among ``ids`` the Prefect API returns when asked for them,
    polling until all are there or ``deadline`` (``time.monotonic()``). The
    server persists received events in batches (every few seconds): an event
    is confirmed once it is stored, not when it was sent."""
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventIDFilter

    wanted = set(ids)
    confirmed: set[str] = set()
    with get_client(sync_client=True) as client:
        while True:
            missing = sorted(wanted - confirmed)
            for start in range(0, len(missing), _READ_PAGE):
                chunk = [UUID(i) for i in missing[start:start + _READ_PAGE]]
                page = client.read_events(EventFilter(id=EventIDFilter(id=chunk)), limit=_READ_PAGE)
                confirmed |= {str(event.id) for event in page.events} & wanted
            if confirmed >= wanted or time.monotonic() + _CONFIRM_POLL_S >= deadline:
                return confirmed
            time.sleep(_CONFIRM_POLL_S)


def event_resource(payload: dict[str, Any]) -> dict[str, str]:
    segment = payload.get("segment") or {}
    label = ",".join(f"{k}={v}" for k, v in segment.items())
    resource = {
        # one resource per (rule, segment): automations can pair a segment's fired and resolved
        "prefect.resource.id": f"judgeflow.rule.{payload['rule']}" + (f".segment.{label}" if label else ""),
        "prefect.resource.name": payload["rule"] + (f" [{label}]" if label else ""),
        "judgeflow.state": payload["state"],
        "judgeflow.rule": payload["rule"],
    }
    if payload.get("metric"):
        resource["judgeflow.metric"] = payload["metric"]
    for key, value in segment.items():
        resource[f"judgeflow.segment.{key}"] = str(value)
    return resource


# --- the notifier -------------------------------------------------------------------


Confirmer = Callable[[list[str], float], set[str]]


class Notifier:
    """Sends one notification to every configured channel. Injectable pieces
    (``emitter``, ``confirmer``, ``sleep``, ``http``) exist for tests and embedding."""

    def __init__(
        self,
        settings: Settings,
        *,
        emitter: Emitter | None = None,
        confirmer: Confirmer | None = None,
        sleep: Callable[[float], None] = time.sleep,
        http: httpx.Client | None = None,
    ):
        self.settings = settings
        self._emitter = emitter
        self._confirmer = confirmer
        self._sleep = sleep
        self._http = http

    def warm(self) -> None:
        """Import what sending needs (Prefect, seconds in a cold CLI process) before
        the delivery time budget starts: the budget is for receivers, not imports."""
        if self.settings.alert_prefect_events and self._emitter is None:
            try:
                prefect_api_available()
            except Exception:  # sending reports it, per delivery
                pass

    def send(self, channel: str, payload: dict[str, Any], *, deadline: float | None = None) -> ChannelResult:
        """Deliver ``payload`` to one channel, within ``deadline`` (``time.monotonic()``). Never raises."""
        send = {"prefect_event": self._send_event, "webhook": self._send_webhook, "slack": self._send_slack}.get(channel)
        if send is None:
            return ChannelResult(channel, "skipped", detail=f"unknown channel {channel!r}")
        left = _left(deadline)
        if left is not None and left <= 0:
            return ChannelResult(channel, "deferred", detail=BUDGET_SPENT)
        try:
            return send(payload, deadline)
        except Exception as error:  # a bug in a channel must not fail the run either
            log.exception("alert channel %s crashed", channel)
            return ChannelResult(channel, "failed", attempts=1, error=scrub(f"{type(error).__name__}: {error}")[:300])

    def _send_event(self, payload: dict[str, Any], deadline: float | None) -> ChannelResult:
        """Emit the event: ``sent``, delivered once :meth:`confirm_events` finds it in the API."""
        if not self.settings.alert_prefect_events:
            return ChannelResult("prefect_event", "skipped", detail="JUDGEFLOW_ALERT_PREFECT_EVENTS is off")
        emitter = self._emitter
        if emitter is None:
            if not prefect_api_available():
                # an evaluation with an API (a scoring run, a configured `alerts check`) sends it
                return ChannelResult("prefect_event", "deferred", detail="no Prefect API here")
            emitter = _prefect_emit
        kwargs: dict[str, Any] = {}
        if payload.get("delivery_id"):
            kwargs["id"] = UUID(payload["delivery_id"])  # a re-sent event is the same event
        event = emitter(event=payload["event"], resource=event_resource(payload), payload=payload, **kwargs)
        if event is None:
            return ChannelResult("prefect_event", "deferred", detail="Prefect events are not being sent here")
        return ChannelResult("prefect_event", "sent", attempts=1, detail=str(getattr(event, "id", "")) or None)

    def announce_dead(self, *, delivery_id: str, channel: str, rule: str, segment_key: str, notification: str,
                      error: str | None) -> None:
        """Report one dead delivery whatever its channel: a log line, and a
        ``judgeflow.alert.delivery.dead`` Prefect event where a Prefect API is
        reachable (even with JUDGEFLOW_ALERT_PREFECT_EVENTS off). Never raises."""
        from judgeflow.alerts.dead_letters import DEAD_EVENT, dead_event_id

        alert = rule + (f" [{segment_key}]" if segment_key else "")
        log.error("alert delivery dead: the %s notification of %s on %s will never be delivered: %s",
                  notification, alert, channel, error or "no error recorded")
        try:
            emitter = self._emitter
            if emitter is None:
                if not prefect_api_available():
                    return
                emitter = _prefect_emit
            resource_id = f"judgeflow.rule.{rule}" + (f".segment.{segment_key}" if segment_key else "")
            resource = {"prefect.resource.id": resource_id, "prefect.resource.name": alert,
                        "judgeflow.rule": rule, "judgeflow.channel": channel}
            emitter(event=DEAD_EVENT, resource=resource, id=dead_event_id(delivery_id, channel), payload={
                "delivery_id": delivery_id, "channel": channel, "rule": rule, "segment": segment_key,
                "notification": notification, "error": error,
            })
        except Exception:  # reporting must not fail the evaluation
            log.exception("could not emit the %s event for %s on %s", DEAD_EVENT, alert, channel)

    def confirm_events(self, ids: list[str], *, deadline: float | None = None) -> tuple[set[str], str | None]:
        """(the event ids among ``ids`` the Prefect API has, why the others are
        not confirmed). Waits at most ``JUDGEFLOW_ALERT_EVENT_CONFIRM_TIMEOUT_S``
        and never past ``deadline``. Never raises."""
        if not ids:
            return set(), None
        if self._confirmer is None and not prefect_api_available():
            return set(), "no Prefect API to confirm it with"
        wait, left = self.settings.alert_event_confirm_timeout_s, _left(deadline)
        if left is not None:
            wait = max(0.0, min(wait, left))
        try:
            confirmed = (self._confirmer or _prefect_confirm)(list(ids), time.monotonic() + wait)
        except Exception as error:
            reason = scrub(f"confirming with the Prefect API failed: {type(error).__name__}: {error}")[:300]
            log.warning("alert Prefect events: %s", reason)
            return set(), reason
        if set(ids) <= confirmed:
            return confirmed, None
        return confirmed, f"emitted, but the Prefect API had not stored it {wait:.3g}s later"

    def _send_webhook(self, payload: dict[str, Any], deadline: float | None) -> ChannelResult:
        if self.settings.alert_webhook_url is None:
            return ChannelResult("webhook", "skipped", detail="JUDGEFLOW_ALERT_WEBHOOK_URL is not set")
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        secret = self.settings.alert_webhook_secret.get_secret_value() if self.settings.alert_webhook_secret else None

        delivery_id = str(payload.get("delivery_id") or payload.get("alert_id"))

        def headers() -> dict[str, str]:
            timestamp = str(int(time.time()))
            h = {
                "Content-Type": "application/json",
                "User-Agent": f"judgeflow/{__version__}",
                EVENT_HEADER: payload["event"],
                DELIVERY_HEADER: delivery_id,
                TIMESTAMP_HEADER: timestamp,
            }
            if secret:
                h[SIGNATURE_HEADER] = sign(secret, timestamp, body, delivery_id=delivery_id)
            return h

        return self._post("webhook", self.settings.alert_webhook_url.get_secret_value(), body, headers, deadline)

    def _send_slack(self, payload: dict[str, Any], deadline: float | None) -> ChannelResult:
        if self.settings.alert_slack_webhook_url is None:
            return ChannelResult("slack", "skipped", detail="JUDGEFLOW_ALERT_SLACK_WEBHOOK_URL is not set")
        body = json.dumps(slack_message(payload)).encode()
        return self._post(
            "slack",
            self.settings.alert_slack_webhook_url.get_secret_value(),
            body,
            lambda: {"Content-Type": "application/json", "User-Agent": f"judgeflow/{__version__}"},
            deadline,
        )

    def _post(
        self, channel: str, url: str, body: bytes, headers: Callable[[], dict[str, str]], deadline: float | None = None
    ) -> ChannelResult:
        """POST with bounded retries, each request's timeout cut to what is left
        before ``deadline`` and no retry started that the wait before it would
        overrun. Error texts never include the URL (Slack's holds a token)."""
        s = self.settings
        client = self._http or httpx.Client(timeout=httpx.Timeout(s.alert_webhook_timeout_s), follow_redirects=False)
        attempts, http_status, error, permanent = 0, None, None, False
        try:
            for attempt in range(s.alert_webhook_retries + 1):
                left = _left(deadline)
                if left is not None and left <= 0:
                    error = f"{error}; not retried: {BUDGET_SPENT}"
                    break
                timeout = s.alert_webhook_timeout_s if left is None else min(s.alert_webhook_timeout_s, left)
                attempts += 1
                retry_after = None
                try:
                    response = client.post(url, content=body, headers=headers(), timeout=httpx.Timeout(timeout))
                except httpx.TimeoutException:
                    http_status, error = None, f"timed out after {timeout:.3g}s"
                except httpx.TransportError as exc:
                    http_status, error = None, self._scrubbed(f"{type(exc).__name__}: {exc}", url)[:300]
                except (httpx.HTTPError, httpx.InvalidURL) as exc:  # invalid URL and the like: retrying cannot help
                    http_status, error = None, self._scrubbed(f"{type(exc).__name__}: {exc}", url)[:300]
                    break
                else:
                    http_status = response.status_code
                    if 200 <= http_status < 300:
                        return ChannelResult(channel, "delivered", attempts=attempts, http_status=http_status)
                    snippet = self._scrubbed(" ".join(response.text[:200].split()), url)
                    error = f"HTTP {http_status}" + (f": {snippet}" if snippet else "")
                    if http_status < 500 and http_status not in RETRYABLE_STATUS:
                        permanent = 400 <= http_status < 500  # the receiver refuses it: the same request never works
                        break
                    retry_after = parse_retry_after(response.headers.get("Retry-After"))
                if attempt < s.alert_webhook_retries:
                    delay = min(s.alert_webhook_backoff_s * 2**attempt, s.alert_webhook_backoff_max_s)
                    if retry_after is not None:
                        delay = min(max(delay, retry_after), s.alert_webhook_backoff_max_s)
                    left = _left(deadline)
                    if left is not None and delay >= left:
                        error = f"{error}; not retried: {BUDGET_SPENT}"
                        break
                    log.warning("alert %s delivery attempt %d failed (%s); retrying in %.1fs", channel, attempts, error, delay)
                    self._sleep(delay)
        finally:
            if self._http is None:
                client.close()
        log.error("alert %s delivery failed after %d attempt(s): %s", channel, attempts, error)
        return ChannelResult(
            channel, "failed", attempts=attempts, http_status=http_status, error=error, permanent=permanent
        )

    def _scrubbed(self, text: str, url: str) -> str:
        """An error text as it may be stored and logged: the URL named by scheme, host
        and port only (a webhook's path and query may be its token, and a receiver
        may echo them), and no other secret."""
        return without_endpoint_path(text, url)
