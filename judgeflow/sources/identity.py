"""The stable identity of the configured trace source, recorded on every result.

``<kind>:<table>@<database>``: the preset (``table``, ``litellm``, ``phoenix``) and
the table it reads (:attr:`TraceSource.identity`), then where that table lives:
``host:port/name`` of ``JUDGEFLOW_SOURCE_DATABASE_URL`` (never its user, password or
options), or ``results-db`` when traces are read from judgeflow's own database.
Worked out from the settings alone, so writing a result needs no extra query.

It changes when the preset, the schema or table, or the source database's host, port
or name change; a replica reached under another host name is another source.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url

from judgeflow.config.settings import Settings

OWN_DATABASE = "results-db"


def source_database(settings: Settings) -> str:
    """``host:port/name`` of the source database, or ``results-db`` for judgeflow's own."""
    url = getattr(settings, "source_database_url", None)
    if url is None:
        return OWN_DATABASE
    parsed = make_url(url.get_secret_value())
    host = parsed.host or (parsed.query.get("host") if parsed.query else None) or "localhost"
    if isinstance(host, tuple):
        host = ",".join(host)
    return f"{host}:{parsed.port or 5432}/{parsed.database or ''}"


def result_source(settings: Settings) -> str:
    """What each result of the configured source records as its ``source``."""
    from judgeflow.sources.trace_source import trace_source

    return f"{trace_source(settings).identity}@{source_database(settings)}"


def preset_of(source: str) -> str:
    """The preset part of a recorded source (``phoenix`` of ``phoenix:spans@results-db``)."""
    return source.split(":", 1)[0]


# Results stored before migration 11_result_sources.py have no source until the first command run with
# settings assigns them to the configured one (judgeflow/db/result_sources.py); until then
# they count as the configured source's.
def of_source(column: str = "source", param: str = "source") -> str:
    """SQL: the result in ``column`` belongs to the source bound as ``:param``."""
    return f"({column} = :{param} OR {column} IS NULL)"
