"""Reading a py-spy profile of ``judgeflow score``.

The benchmark records with ``py-spy record --gil --nonblocking -f raw``: only
the thread holding the GIL is sampled, so the samples say where the scoring
process spends its one core's worth of Python time, whichever thread it is in
(pyinstrument samples only the thread it was started in and would miss the
task and judge threads). ``summarise`` sorts every sample into a few buckets,
by the first matching frame from the outside in, and lists the heaviest
functions.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")

# (bucket, predicate over "func (file)") in priority order: a sample goes to the
# first bucket any of its frames matches.
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("imports (process and litellm start-up)", ("_find_and_load",)),
    ("judge calls (litellm, openai, httpx, aiohttp)", ("LiteLLMJudge.",)),
    ("result writes (store_outcomes)", ("store_outcomes", "_write (")),
    ("claims and lease renewal", ("claim_traces", "LeaseKeeper", "count_pending")),
    ("metrics (prompts, validation)", ("ToxicityMetric", "HallucinationMetric", "score_pair")),
    ("prefect (engine, events, logs, API)", ("prefect/",)),
    # litellm's own background work: the sync half of acompletion it runs in an
    # executor, its success/logging handlers
    ("judge calls: litellm background (executor, logging handlers)",
     ("litellm", "openai/", "aiohttp/", "httpx/", "httpcore/")),
]


def _label(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m["file"].split("site-packages/")[-1]
    return f"{m['func']} ({path})"


def summarise(raw: Path, top: int = 20) -> str:
    buckets: Counter = Counter()
    inclusive: Counter = Counter()
    own: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_label(f) for f in stack.split(";")]
        for name in set(frames):
            inclusive[name] += n
        own[frames[-1]] += n
        for bucket, needles in BUCKETS:
            if any(needle in f for f in frames for needle in needles):
                buckets[bucket] += n
                break
        else:
            buckets["other (event loop, threads, native)"] += n
    if not total:
        return "(no samples)"
    out = [f"samples: {total} (GIL held)", "", "| where | share of GIL time |", "|---|---|"]
    out += [f"| {b} | {100 * n / total:.1f}% |" for b, n in buckets.most_common()]
    out += ["", f"heaviest functions (inclusive), top {top}:", ""]
    skip = ("Thread.", "_bootstrap", "_worker (", "_WorkItem.run", "BaseEventLoop.", "Handle._run", "<module>")
    shown = 0
    for name, n in inclusive.most_common():
        if name.startswith(skip) or name.startswith("thread ("):
            continue
        out.append(f"  {100 * n / total:5.1f}%  {name}")
        shown += 1
        if shown >= top:
            break
    out += ["", "heaviest functions (self), top 10:", ""]
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(10)]
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20))
