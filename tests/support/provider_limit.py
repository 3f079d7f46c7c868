"""A provider's account limit, as the local judge server enforces it: requests and tokens per minute.

Like a real provider, it counts what it accepted over the last 60 seconds (a
sliding window, stricter than any per-minute bucket) and answers 429 with a
``Retry-After`` (the seconds until the window has room) to a request past it.
It counts both: the requests it accepted (each one's time and tokens, for
per-minute buckets) and those it refused. :meth:`ProviderLimit.refuse_for`
plays another client on the same key using the account up: every request
for that long is refused (counted apart, as ``outside``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

WINDOW_S = 60.0


class ProviderLimit:
    """``rpm`` requests and ``tpm`` tokens per 60 s (None: not limited)."""

    def __init__(self, rpm: int | None = None, tpm: int | None = None) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self._window: deque[list] = deque()  # [time.monotonic(), tokens] of each request accepted in the window
            self.accepted: list[tuple[float, int]] = []  # (time.time(), tokens) of every request accepted
            self.refused = 0  # 429s for the limit
            self.outside = 0  # 429s while another client holds the account (refuse_for)
            self._outside_until = 0.0

    def refuse_for(self, seconds: float) -> None:
        """Another client on the key: every request for ``seconds`` gets a 429."""
        with self._lock:
            self._outside_until = time.monotonic() + seconds

    def admit(self) -> tuple[float | None, object]:
        """``(None, ticket)``: the request is accepted and counted (its tokens
        come with :meth:`used`); ``(retry_after_s, None)``: a 429."""
        now = time.monotonic()
        with self._lock:
            if now < self._outside_until:
                self.outside += 1
                return self._outside_until - now, None
            while self._window and self._window[0][0] <= now - WINDOW_S:
                self._window.popleft()
            full_rpm = self.rpm is not None and len(self._window) >= self.rpm
            full_tpm = self.tpm is not None and sum(t for _, t in self._window) >= self.tpm
            if full_rpm or full_tpm:
                self.refused += 1
                return max(0.001, self._window[0][0] + WINDOW_S - now), None
            entry = [now, 0]
            self._window.append(entry)
            self.accepted.append((time.time(), 0))
            return None, (entry, len(self.accepted) - 1)

    def used(self, ticket: object, tokens: int) -> None:
        """The tokens (its reply's usage) of the request ``ticket`` was accepted for."""
        entry, index = ticket  # type: ignore[misc]
        with self._lock:
            entry[1] = tokens
            self.accepted[index] = (self.accepted[index][0], tokens)

    def stats(self) -> dict:
        with self._lock:
            accepted = list(self.accepted)
            refused, outside = self.refused, self.outside
        times = [t for t, _ in accepted]
        return {"rpm": self.rpm, "tpm": self.tpm, "accepted": len(accepted), "refused": refused,
                "first_at": times[0] if times else None, "last_at": times[-1] if times else None,
                "outside": outside, "per_minute": per_minute(accepted), "max_60s": max_in_window(times),
                "max_tokens_60s": max_tokens_in_window(accepted)}


def per_minute(accepted: list[tuple[float, int]]) -> list[int]:
    """Requests accepted in each minute from the first (fixed buckets)."""
    if not accepted:
        return []
    first = accepted[0][0]
    buckets = [0] * (math.floor((accepted[-1][0] - first) / 60) + 1)
    for t, _ in accepted:
        buckets[math.floor((t - first) / 60)] += 1
    return buckets


def max_in_window(times: list[float], window_s: float = WINDOW_S) -> int:
    """The most requests in any ``window_s`` (sliding)."""
    best, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - window_s:
            start += 1
        best = max(best, end - start + 1)
    return best


def max_tokens_in_window(accepted: list[tuple[float, int]], window_s: float = WINDOW_S) -> int:
    """The most tokens in any ``window_s`` (sliding)."""
    best, start, total = 0, 0, 0
    for t, tokens in accepted:
        total += tokens
        while accepted[start][0] <= t - window_s:
            total -= accepted[start][1]
            start += 1
        best = max(best, total)
    return best
