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

from judgeflow.terminal_text import visible

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
# an ordinary word of a path ("services", "span_annotations", "web-hooks"); anything else of
# MIN_SECRET_CHARS or more ("ourSecretHook") may be a token chosen by whoever made the URL
_PLAIN_WORD = re.compile(r"^[a-z]+(?:[-_.][a-z]+)*$")


def _secret_segment(segment: str) -> bool:
    return bool(_TOKEN_SEGMENT.match(segment)) or (
        len(segment) >= MIN_SECRET_CHARS and not _PLAIN_WORD.match(segment))


def url_path_secrets(url: str | None) -> list[str]:
    """The secret parts of a secret URL's path: each segment that may be a token,
    and, when there is one, the whole path (with its query) and each tail of the path
    that holds one (a receiver's 404 may echo "/ourSecretHook" without "/hooks");
    as written and as decoded."""
    if not url or "://" not in url:
        return []
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return []
    segments = parts.path.split("/")
    found = [seg for seg in segments if _secret_segment(seg)]
    if found:  # a path of plain words ("/judgeflow") is no secret, and masking it would blank file paths
        tails = ["/".join(segments[i:]) for i in range(len(segments))]
        found += [t for t in tails if any(_secret_segment(seg) for seg in t.split("/"))
                  and len(t) >= MIN_SECRET_CHARS]
        found.append(parts.path)
        if parts.query:
            found.append(f"{parts.path}?{parts.query}")
    if parts.query:  # the query whole and each of its pairs: any of them may be echoed alone
        found += [q for q in [parts.query, *re.split(r"[&;]", parts.query)] if len(q) >= MIN_SECRET_CHARS]
    return found + [unquote(v) for v in found if unquote(v) != v]


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: all an error may say of an endpoint whose
    path or query may hold its token (a webhook's, Slack's, Phoenix's)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    except ValueError:
        return "(an invalid URL)"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port}" if port else f"{parts.scheme}://{host}"


def without_endpoint_path(text: str, url: str) -> str:
    """``text`` with ``url``, and any URL on its host, cut down to :func:`origin`, and
    every part of ``url``'s path and query masked (:func:`scrub` with it as ``extra``)."""
    if not text:
        return text
    try:
        host = (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        host = ""

    def cut(match: re.Match) -> str:
        try:
            same = (urlsplit(match.group(0)).hostname or "").lower() == host
        except ValueError:
            same = False
        return origin(match.group(0)) if same and host else match.group(0)

    text = text.replace(url.strip(), origin(url))
    return scrub(_URL.sub(cut, text), (url,))


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
    phoenix = getattr(settings, "phoenix_url", None)
    if phoenix:
        values += url_path_secrets(phoenix)
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
        # a log line may carry a judge's reply or a receiver's answer: no control character of theirs
        # reaches a terminal, a pipe or the Prefect UI as one (judgeflow.terminal_text)
        record.msg, record.args = visible(scrub(message)), None
        if record.exc_info and not record.exc_text:
            record.exc_text = visible(scrub(logging.Formatter().formatException(record.exc_info)))
        if record.stack_info:
            record.stack_info = visible(scrub(record.stack_info))
        return record

    logging.setLogRecordFactory(factory)
