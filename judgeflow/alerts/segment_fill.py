"""A segment key configured after results were scored: said where it shows, and filled in.

``judgeflow db fill-segments KEY`` reads each scored trace's metadata from the
source again (no judge call) and adds the key's value to the segment of every
result of the trace, a page of traces per transaction. It walks the traces by
id and updates only results that lack the key, so a stopped fill resumes where
the table says it stopped: run it again. A trace whose metadata has no value
for the key (or that is no longer in the source) keeps a segment without it;
its results count overall only, as when scored."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from judgeflow.alerts.segments import segment_values
from judgeflow.config.settings import Settings
from judgeflow.db.engine import engine_for, source_engine
from judgeflow.db.result_sources import adopt_configured_source
from judgeflow.db.segment_keys import fill_page, fill_values, keys_carried
from judgeflow.sources.identity import result_source
from judgeflow.sources.trace_source import read_bodies, trace_source
from judgeflow.sources.types import TraceKey

FILL_PAGE = 1000  # traces per read of the source and per update


@dataclass
class Filled:
    traces: int = 0  # traces read
    with_value: int = 0  # traces whose metadata held a value for the key
    results: int = 0  # result rows updated

    def line(self, key: str) -> str:
        return (f"{key}: {self.traces:,} traces read, {self.with_value:,} with a value, "
                f"{self.results:,} results filled")


def fill_segment_key(settings: Settings, key: str, *, page: int = FILL_PAGE,
                     on_page: Callable[[Filled], None] | None = None) -> Filled:
    """Fill ``key`` into the segment of the configured source's results that lack it."""
    engine, source, reader = engine_for(settings), trace_source(settings), source_engine(settings)
    # results written before sources were recorded are the configured source's from here on
    identity, done, after = adopt_configured_source(engine, settings).source, Filled(), ""
    while True:
        with engine.connect() as conn:
            traces = fill_page(conn, identity, key, after=after, page=page)
        if not traces:
            return done
        bodies = read_bodies(source, reader, [TraceKey(i, at) for i, at in traces]).bodies
        values = {i: v for i, b in bodies.items() if (v := segment_values(b.metadata, (key,)))}
        with engine.begin() as conn:
            done.results += fill_values(conn, identity, values)
        done.traces += len(traces)
        done.with_value += len(values)
        after = traces[-1][0]
        if on_page is not None:
            on_page(done)


def missing_key_lines(settings: Settings, conn, keys: tuple[str, ...], since: datetime) -> list[str]:
    """One line per key the report breaks down by that the results do not carry over the whole
    period: which keys they carry and since when, and the command that fills it in."""
    carried = keys_carried(conn, result_source(settings))
    first_result = carried.pop("", None)
    since = max(since, first_result) if first_result is not None else since
    have = ", ".join(f"{k} since {at:%Y-%m-%d %H:00}Z" for k, at in carried.items()) or "none"
    lines = []
    for key in keys:
        first = carried.get(key)
        if first is None:
            lines.append(f"no result carries segment key {key!r} (it was not a segment key when they were "
                         f"scored); the results carry: {have}. `judgeflow db fill-segments {key}` fills it in")
        elif first > since:
            lines.append(f"segment key {key!r}: only results of traces since {first:%Y-%m-%d %H:00}Z carry it; "
                         f"`judgeflow db fill-segments {key}` fills it into older ones")
    return lines
