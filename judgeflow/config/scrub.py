"""Credentials out of every text judgeflow writes: logs, errors,
``eval_results.error``, artifacts, events.

Three layers, applied by :func:`scrub`:

1. **Exact values** of the configured secrets (:func:`register_settings`: the
   ``SecretStr`` settings once resolved, Prefect Secret blocks included, and
   the credential parts of the URLs among them). This is what catches keys
   with no recognisable shape (Azure's 32 hex digits, a password).
2. **Credentials inside any URL**: the userinfo (``https://user:pass@host``)
   and the values of credential query parameters (``key``, ``api-key``,
   ``api_key``, ``token``, ``sig``, ``signature``, ``access_token``, ...).
   The rest of the URL stays readable.
   A secret URL's **path** is a credential too (a Slack or webhook URL holds its
   token there, and a receiver's 404 may echo it): for the registered ones and
   the ``extra`` URLs given to :func:`scrub`, the path and each of its
   token-like segments are masked wherever they appear (:func:`url_path_secrets`).
3. **Key-shaped tokens**: ``sk-...`` and the like, ``AIza...`` (Google),
   ``Bearer ...``.

:func:`install_log_scrubbing` makes every log record of the process go
through :func:`scrub` (message, arguments and traceback), so a library that
logs a URL or an exception text cannot leak what judgeflow knows is secret.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Iterable
from urllib.parse import SplitResult, unquote, urlsplit

MASK = "***"
# shorter values would blank out ordinary words; no real credential is this short
MIN_SECRET_CHARS = 6

CREDENTIAL_PARAMS = frozenset({
    "key", "api-key", "api_key", "apikey", "x-api-key", "token", "access_token", "access-token", "auth",
    "auth_token", "id_token", "refresh_token", "client_secret", "secret", "password", "passwd", "pwd",
    "sig", "signature", "x-amz-signature", "x-goog-signature", "x-amz-security-token", "code",
})

_URL = re.compile(r"""\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'"<>`]+""")
# a query parameter anywhere in a text (also outside a full URL, e.g. an echoed path)
_PARAM = re.compile(r"(?i)([?&;](?:%s)=)([^&#\s'\"<>`]+)" % "|".join(re.escape(p) for p in sorted(CREDENTIAL_PARAMS)))
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key)-[A-Za-z0-9_\-*.]{6,}", re.IGNORECASE)
_GOOGLE_KEY = re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}")
# a token: 8+ characters with a digit or a symbol in them ("the bearer of bad news" stays)
_BEARER = re.compile(r"(?i)\b(bearer)\s+(?=[A-Za-z]*[0-9._~+/=\-])[A-Za-z0-9._~+/=\-]{8,}")

_lock = threading.Lock()
_secrets: set[str] = set()


# --- URLs ------------------------------------------------------------------------


def url_credentials(url: str | None) -> list[str]:
    """The credential parts of ``url``: user, password, credential query values."""
    if not url:
        return []
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return []
    found = []
    if parts.username:
        found.append(parts.username)
    if parts.password:
        found.append(parts.password)
    for pair in re.split(r"[&;]", parts.query):
        name, _, value = pair.partition("=")
        if name.lower() in CREDENTIAL_PARAMS and value:
            found.append(value)
    # as written and as decoded (a password with '@' or '/' is percent-encoded in a URL)
    return found + [unquote(v) for v in found if unquote(v) != v]


# a path segment that is an identifier or a token: long, or with a digit in it
# ("services", "hooks" and the like stay readable)
_TOKEN_SEGMENT = re.compile(r"^(?=.*[0-9]).{%d,}$|^.{16,}$" % MIN_SECRET_CHARS)


def url_path_secrets(url: str | None) -> list[str]:
    """The secret parts of a secret URL's path: each segment that looks like an
    identifier or a token and, when there is one, the whole path; as written and
    as decoded."""
    if not url or "://" not in url:
        return []
    try:
        path = urlsplit(url.strip()).path
    except ValueError:
        return []
    found = [seg for seg in path.split("/") if _TOKEN_SEGMENT.match(seg)]
    if found:  # a path of plain words ("/judgeflow") is no secret, and masking it would blank file paths
        found.append(path)
    return found + [unquote(v) for v in found if unquote(v) != v]


def _userinfo(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.username is None:
        return None
    return f"{unquote(parts.username)}:{unquote(parts.password or '')}"


def has_credentials(url: str | None) -> bool:
    return bool(url_credentials(url))


def scrub_url(url: str) -> str:
    """``url`` with its userinfo and credential query values masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _PARAM.sub(lambda m: m.group(1) + MASK, url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = _PARAM.sub(lambda m: m.group(1) + MASK, "?" + parts.query)[1:] if parts.query else parts.query
    return SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment).geturl()


# --- text ------------------------------------------------------------------------


def register(values: Iterable[str | None]) -> None:
    """Scrub these exact values from now on, in this process."""
    with _lock:
        for value in values:
            if value and len(value.strip()) >= MIN_SECRET_CHARS:
                _secrets.add(value.strip())


def register_settings(settings) -> None:
    """Register every secret setting's value, and the credentials inside the URLs
    among them (the judge's base URL included, when it carries any)."""
    from pydantic import SecretStr

    values: list[str] = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if not isinstance(value, SecretStr):
            continue
        raw = value.get_secret_value()
        credentials = url_credentials(raw) if "://" in raw else []
        if raw.startswith(("postgresql", "postgres://")):
            # a database role name is an identity, not a credential (the password is
            # one): masked, the embedded database's role "judgeflow" blanked the
            # project's own name in every log line and artifact
            role = urlsplit(raw).username or ""
            credentials = [c for c in credentials if c not in (role, unquote(role))]
        if name == "judge_api_base" and not credentials:
            continue  # a plain endpoint is not a secret; logs may name it
        values.append(raw)
        values += credentials
        if raw.startswith(("http://", "https://")):  # a webhook's path holds its token
            values += url_path_secrets(raw)
        userinfo = _userinfo(raw)
        if userinfo:  # as httpx sends it: Authorization: Basic <base64>
            values.append(base64.b64encode(userinfo.encode()).decode())
        if raw.startswith("postgresql+psycopg://"):  # also as the user wrote it
            values.append("postgresql://" + raw.removeprefix("postgresql+psycopg://"))
    register(values)


def registered() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def scrub(text: str, extra: Iterable[str | None] = ()) -> str:
    """``text`` without registered secrets, ``extra`` values, URL credentials or key-shaped tokens."""
    if not text:
        return text
    values = set(registered())
    extra = [v for v in extra if v]
    values.update(v.strip() for v in extra if len(v.strip()) >= 4)
    values.update(p for v in extra for p in url_path_secrets(v))
    # longest first: a URL is replaced whole before the password inside it
    for value in sorted(values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    text = _URL.sub(lambda m: scrub_url(m.group(0)), text)
    text = _PARAM.sub(lambda m: m.group(1) + MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _GOOGLE_KEY.sub(MASK, text)
    text = _KEYLIKE.sub(MASK, text)
    return text


# --- logs --------------------------------------------------------------------------

_installed = False


def install_log_scrubbing() -> None:
    """Scrub every log record created in this process from now on (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to the handler to report
            return record
        record.msg, record.args = scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)
