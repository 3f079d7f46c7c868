"""Where a key may be sent: never over plain ``http://`` to a host other than this machine.

A bearer key (the judge's, the shadow candidate's, Phoenix's) sent over plain HTTP
can be read by anyone on the path. :func:`check_key_destinations` runs once at each
entry point (``judgeflow.config.settings.load_settings``), after Prefect Secret references
are resolved, so a misconfiguration is one ConfigError at start instead of a key sent
with every request. Loopback (``localhost``, 127.0.0.0/8, ``::1``) is this machine;
any other host needs ``https://`` or a place in ``JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS``
(a private network the operator vouches for, such as a compose stack's service names).

The judge's key and base are not only judgeflow's settings: litellm falls back to
its provider variables for either (``OPENAI_API_KEY``, ``OPENAI_API_BASE``,
``OPENAI_BASE_URL``, ``AZURE_API_BASE``, ``HOSTED_VLLM_API_KEY``, ...), read from
the environment and from the ``.env`` litellm loads. This module does not import
litellm, so it judges what litellm could use, erring towards refusal:

* the base is ``JUDGEFLOW_JUDGE_API_BASE`` when set (litellm's ``api_base``
  argument wins over every variable), else every provider base variable set;
* a key goes along when ``JUDGEFLOW_JUDGE_API_KEY`` is set, or when any provider
  key variable is set (litellm picks the one of the model's provider).

A metric with a judge model of its own (``model`` in a metrics file) is sent to
the judge's base with the judge's key. Without ``JUDGEFLOW_JUDGE_API_BASE``,
litellm finds the host from the model's provider prefix: a metric model of
another provider than ``JUDGEFLOW_JUDGE_MODEL``'s would carry
``JUDGEFLOW_JUDGE_API_KEY`` to another host, and is refused
(:func:`check_metric_models`; the shadow candidate's rule).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from judgeflow.errors import ConfigError
from judgeflow.config.judge_models import judge_models

# litellm's provider variables: <PROVIDER>_API_BASE (and _API_BASE_IMAGE and the like),
# <PROVIDER>_BASE_URL, a few others (watsonx, bedrock)
_PROVIDER_BASE = re.compile(r"^[A-Z0-9_]+_(API_BASE(_[A-Z0-9]+)?|BASE_URL)$|^(WATSONX|WML|WX)_URL$"
                            r"|^AWS_BEDROCK_RUNTIME_ENDPOINT$")
# <PROVIDER>_API_KEY (_APIKEY, AIMLAPI_KEY), _TOKEN (_AD_TOKEN, _AUTH_TOKEN), _API_SECRET, _SECRET_KEY;
# not any _KEY: images set GPG_KEY and the like
_PROVIDER_KEY = re.compile(r"^[A-Z0-9_]*(API_?KEY|_TOKEN|_API_SECRET|_SECRET_KEY)$")
# variables of programs other than litellm (judgeflow's own are settings, checked by name)
_NOT_LITELLM = ("JUDGEFLOW_", "PREFECT_", "PHOENIX_", "PG", "LITELLM_LOCAL_MODEL_COST_MAP")


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_host(url: str | None, allowed_hosts: Iterable[str] = ()) -> str | None:
    """The host ``url`` would send a key to over plain HTTP, when that host is neither
    loopback nor among ``allowed_hosts``; else None."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None  # not a URL this check can judge; the client reports it
    if parts.scheme.lower() != "http" or is_loopback(parts.hostname):
        return None
    if (parts.hostname or "").lower() in {h.strip().lower() for h in allowed_hosts if h.strip()}:
        return None
    return parts.hostname or ""


def refuse_plain_http_key(url: str | None, *, key_setting: str, url_setting: str,
                          allowed_hosts: Iterable[str] = ()) -> None:
    """ConfigError if a key would be sent to ``url`` over plain HTTP to a host that is
    neither loopback nor among ``allowed_hosts``. The URL is named by its setting
    only (it may hold credentials)."""
    host = plain_http_host(url, allowed_hosts)
    if host is None:
        return
    raise ConfigError(
        f"{key_setting} would be sent over plain http:// to {host} ({url_setting}); use https://, "
        f"a loopback address, or name the host in JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS if its network is private"
    )


def litellm_environment(cwd: Path | None = None) -> dict[str, str]:
    """The variables litellm reads: the process's, and those of the ``.env`` it loads
    (the environment wins, as litellm's loading does not override it)."""
    from dotenv import dotenv_values

    path = (cwd or Path.cwd()) / ".env"
    found = {k: v for k, v in dotenv_values(path).items() if v} if path.is_file() else {}
    return {**found, **os.environ}


def _litellm_names(environ: Mapping[str, str], pattern: re.Pattern) -> list[str]:
    return sorted(name for name, value in environ.items()
                  if value and pattern.match(name) and not name.startswith(_NOT_LITELLM))


def check_judge_destination(model: str, base: str | None, key: str | None, *, environ: Mapping[str, str],
                            allowed_hosts: Iterable[str], base_setting: str, key_setting: str) -> None:
    """ConfigError when a litellm judge of ``model`` would send a key over plain HTTP to
    another host, with the base and key litellm could use (see the module doc)."""
    if model == "offline" or model.startswith("offline/"):
        return  # the offline judge sends nothing
    keys = [key_setting] if key else _litellm_names(environ, _PROVIDER_KEY)
    if not keys:
        return  # no key anywhere: a key-less endpoint
    bases = [(base, base_setting)] if base else [(environ[n], n) for n in _litellm_names(environ, _PROVIDER_BASE)]
    for url, url_setting in bases:
        refuse_plain_http_key(url, key_setting=" / ".join(keys), url_setting=url_setting, allowed_hosts=allowed_hosts)


def provider_of(model: str) -> str:
    """litellm's provider prefix of a model string ('' for a bare name)."""
    return model.split("/", 1)[0] if "/" in model else ""


def check_metric_models(judge_model: str, base: str | None, key: str | None,
                        models: Mapping[str, str]) -> None:
    """ConfigError when a metric's own judge model (``models``: metric -> the model that
    judges it) would take the judge's key to another host: no judge base, and a provider
    other than ``judge_model``'s."""
    if base or not key:
        return  # one base for every model, or the provider's own key from its variable
    for metric, model in models.items():
        if model != judge_model and provider_of(model) != provider_of(judge_model):
            raise ConfigError(
                f"metric {metric}: its judge model {model!r} is another provider's than JUDGEFLOW_JUDGE_MODEL "
                f"{judge_model!r}, and JUDGEFLOW_JUDGE_API_KEY is never sent to another host: set "
                "JUDGEFLOW_JUDGE_API_BASE (an endpoint serving both), unset JUDGEFLOW_JUDGE_API_KEY (each "
                "provider's own key variable), or choose a model of the same provider"
            )


def _value(secret) -> str | None:
    return secret.get_secret_value() if secret is not None else None


def allowed_hosts(settings) -> tuple[str, ...]:
    return tuple((settings.plain_http_key_hosts or "").split(","))


def check_key_destinations(settings, environ: Mapping[str, str] | None = None) -> None:
    """Every key of ``settings`` and the URL it would go to (see the module doc): the
    judge's (score, backfill, calibrate), the shadow candidate's and Phoenix's, which
    goes with every read of its API as well as the write-back."""
    environ = litellm_environment() if environ is None else environ
    allowed = allowed_hosts(settings)
    check_judge_destination(settings.judge_model, _value(settings.judge_api_base), _value(settings.judge_api_key),
                            environ=environ, allowed_hosts=allowed, base_setting="JUDGEFLOW_JUDGE_API_BASE",
                            key_setting="JUDGEFLOW_JUDGE_API_KEY")
    check_metric_models(settings.judge_model, _value(settings.judge_api_base), _value(settings.judge_api_key),
                        judge_models(settings))
    if settings.shadow_judge_api_key is not None:
        refuse_plain_http_key(_value(settings.shadow_judge_api_base), key_setting="the candidate's key",
                              url_setting="--judge-api-base / JUDGEFLOW_SHADOW_JUDGE_API_BASE", allowed_hosts=allowed)
    if settings.phoenix_api_key is not None:
        refuse_plain_http_key(settings.phoenix_url, key_setting="JUDGEFLOW_PHOENIX_API_KEY",
                              url_setting="JUDGEFLOW_PHOENIX_URL", allowed_hosts=allowed)


def account_material(settings, environ: Mapping[str, str] | None = None) -> str:
    """What says whose account the judge's calls are billed to: its endpoint and key (the settings', or
    else the provider variables litellm reads), with its provider. Only ever hashed
    (judgeflow/run/account.py names the account's rate limits by it)."""
    environ = litellm_environment() if environ is None else environ
    base = _value(settings.judge_api_base)
    key = _value(settings.judge_api_key)
    bases = [base] if base else [environ[n] for n in _litellm_names(environ, _PROVIDER_BASE)]
    keys = [key] if key else [environ[n] for n in _litellm_names(environ, _PROVIDER_KEY)]
    return "\n".join([provider_of(settings.judge_model), *bases, "", *keys])
