"""Engines, built lazily and cached per process.

Tasks receive settings, never engines: an engine is neither picklable nor safe
to hash for cache keys, and Prefect may run tasks on other threads. Each
process builds at most one engine per URL on first use.
"""

from __future__ import annotations

import threading

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from judgeflow.errors import ConfigError
from judgeflow.config.settings import Settings, normalise_database_url

# psycopg prepares a statement server-side once it has run a few times on a
# connection (prepare_threshold, 5 by default). Behind a transaction pooler
# (PgBouncer's pool_mode = transaction, managed poolers like it) the next
# transaction may run on another server connection, which has another
# client's statement of that name or lacks this one: the statement fails
# (DuplicatePreparedStatement, InvalidSqlStatementName). judgeflow never
# prepares: on a direct connection that costs about nothing measurable
# (docs/benchmark.md, "Prepared statements").
CONNECT_ARGS = {"connect_timeout": 10, "prepare_threshold": None}

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def redact(url: str) -> str:
    """The URL with its password masked, for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable database URL>"


_embedded_urls: dict[tuple[str, str], str] = {}  # (home, database): its URL


def database_url(settings: Settings) -> str:
    """The configured URL, or the embedded database's when none is set
    (started on first use in this process, then remembered)."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    from judgeflow.db.embedded import EmbeddedPostgres

    key = (str(settings.home.resolve()), settings.embedded_database)
    with _lock:
        if key not in _embedded_urls:
            _embedded_urls[key] = EmbeddedPostgres.for_settings(settings).start()
        return _embedded_urls[key]


def get_engine(url: str, *, pool_size: int = 10) -> Engine:
    url = normalise_database_url(url)
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            try:
                parsed = make_url(url)
            except Exception:
                raise ConfigError("JUDGEFLOW_DATABASE_URL is not a valid SQLAlchemy URL") from None
            if not parsed.drivername.startswith("postgresql"):
                raise ConfigError(f"judgeflow needs PostgreSQL, got {parsed.drivername!r}")
            engine = create_engine(
                url,
                # pre-ping replaces connections a restarted server dropped,
                # so a database blip costs a retry, not the rest of the run
                pool_pre_ping=True,
                pool_size=pool_size,
                max_overflow=pool_size,
                pool_timeout=30,
                connect_args={**CONNECT_ARGS, "application_name": "judgeflow"},
            )
            _engines[url] = engine
        return engine


def engine_for(settings: Settings) -> Engine:
    return get_engine(database_url(settings), pool_size=settings.max_concurrency + 4)


def source_engine(settings: Settings) -> Engine:
    """Where traces are read: ``JUDGEFLOW_SOURCE_DATABASE_URL`` or judgeflow's database."""
    url = getattr(settings, "source_database_url", None)
    if url is None:
        return engine_for(settings)
    return get_engine(url.get_secret_value(), pool_size=4)


def dispose_engines() -> None:
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _embedded_urls.clear()
