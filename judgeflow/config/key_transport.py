"""Where a key may be sent: never over plain ``http://`` to a host other than this machine.

A bearer key (the judge's, the shadow candidate's, Phoenix's) sent over plain HTTP
can be read by anyone on the path. :func:`check_key_destinations` runs once at each
entry point (``judgeflow.config.settings.load_settings``), after Prefect Secret references
are resolved, so a misconfiguration is one ConfigError at start instead of a key sent
with every request. Loopback (``localhost``, 127.0.0.0/8, ``::1``) is this machine;
any other host needs ``https://`` or a place in ``JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS``
(a private network the operator vouches for, such as a compose stack's service names).
"""

from __future__ import annotations

import ipaddress
from typing import Iterable
from urllib.parse import urlsplit

from judgeflow.errors import ConfigError


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


def refuse_plain_http_key(url: str | None, *, key_setting: str, url_setting: str,
                          allowed_hosts: Iterable[str] = ()) -> None:
    """ConfigError if a key would be sent to ``url`` over plain HTTP to a host that is
    neither loopback nor among ``allowed_hosts``. The URL is named by its setting
    only (it may hold credentials)."""
    if not url:
        return
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return  # not a URL this check can judge; the client reports it
    if parts.scheme.lower() != "http" or is_loopback(parts.hostname):
        return
    if (parts.hostname or "").lower() in {h.strip().lower() for h in allowed_hosts if h.strip()}:
        return
    raise ConfigError(
        f"{key_setting} would be sent over plain http:// to {parts.hostname} ({url_setting}); use https://, "
        f"a loopback address, or name the host in JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS if its network is private"
    )


def _value(secret) -> str | None:
    return secret.get_secret_value() if secret is not None else None


def check_key_destinations(settings) -> None:
    """Every key of ``settings`` and the URL it would go to (see the module doc)."""
    allowed = tuple((settings.plain_http_key_hosts or "").split(","))
    if settings.judge_api_key is not None:
        refuse_plain_http_key(_value(settings.judge_api_base), key_setting="JUDGEFLOW_JUDGE_API_KEY",
                              url_setting="JUDGEFLOW_JUDGE_API_BASE", allowed_hosts=allowed)
    if settings.shadow_judge_api_key is not None:
        refuse_plain_http_key(_value(settings.shadow_judge_api_base), key_setting="the candidate's key",
                              url_setting="--judge-api-base / JUDGEFLOW_SHADOW_JUDGE_API_BASE", allowed_hosts=allowed)
    if settings.phoenix_write_back and settings.phoenix_api_key is not None:
        refuse_plain_http_key(settings.phoenix_url, key_setting="JUDGEFLOW_PHOENIX_API_KEY",
                              url_setting="JUDGEFLOW_PHOENIX_URL", allowed_hosts=allowed)
