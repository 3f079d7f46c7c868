"""The ``hallucination`` step: context overlap.

Abstains without context. With context, each checkable output sentence must
have its numbers in the context (with a compatible unit, in a context sentence
about the same thing), its named entities as whole phrases, and at least
:data:`COVERAGE_MIN` of its content words. Score = unsupported sentences /
checkable sentences."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from judgeflow.errors import JudgeAbstained
from judgeflow.judge.offline.sentences import Token, clip, number_value, split_sentences, stem, tokens

# Share of an output sentence's content words that must appear in the context.
COVERAGE_MIN = 0.50
# ... unless at most this many content words are missing (a short sentence
# with one reworded word is not a hallucination by itself).
MISSING_WORDS_ALLOWED = 1

ABSTAIN_NO_CONTEXT = "offline judge cannot check for hallucination without context"

STOP_WORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further had hadn't has hasn't have haven't having he
    he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in
    into is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once
    only or other ought our ours ourselves out over own same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's these
    they they'd they'll they're they've this those through to too under until up very was wasn't we
    we'd we'll we're we've were weren't what what's when when's where where's which while who who's
    whom why why's with won't would wouldn't you you'd you'll you're you've your yours yourself
    yourselves will just may might must shall also still yes per via each every within without
    around about across along among upon onto any many much really us one ones yet ever even""".split()
)
# Low-information words a paraphrase adds freely; not required in the context.
GENERIC = frozenset(
    """go goes going went gone get gets got getting take takes took taken make makes made come comes
    came give gives gave put puts keep keeps kept use uses used using need needs want wants able can
    long least many much usually typically generally normally often always sometimes about around
    approximately roughly nearly almost exactly currently now today thing things way ways lot lots
    bit back also well like half whole""".split()
)
# Words that carry no checkable claim in a support answer.
CONVERSATIONAL = frozenset(
    """hi hello hey dear thanks thank please happy glad help helps helped hope let know sure course
    welcome sorry great question questions anything else feel free reach reaching out contact
    anytime ok okay assist assistance note certainly absolutely cheers regards best wishes""".split()
)
_WORD_NUMBERS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "dozen": 12,
}
_UNITS = {
    "%": "%", "percent": "%", "per cent": "%", "percentage": "%",
    "$": "$", "usd": "$", "dollar": "$", "dollars": "$",
    "\u20ac": "\u20ac", "eur": "\u20ac", "euro": "\u20ac", "euros": "\u20ac",
    "\u00a3": "\u00a3", "gbp": "\u00a3", "pound": "\u00a3", "pounds": "\u00a3",
    "mg": "mg", "milligram": "mg", "milligrams": "mg",
    "g": "g", "gram": "g", "grams": "g", "kg": "kg", "kilo": "kg", "kilos": "kg",
    "kilogram": "kg", "kilograms": "kg", "lb": "lb", "lbs": "lb",
    "km/h": "km/h", "kmh": "km/h", "kph": "km/h", "mph": "mph",
    "km": "km", "kilometre": "km", "kilometres": "km", "kilometer": "km", "kilometers": "km",
    "m": "m", "metre": "m", "metres": "m", "meter": "m", "meters": "m",
    "cm": "cm", "mm": "mm", "mile": "mi", "miles": "mi", "ft": "ft", "feet": "ft",
    "ml": "ml", "l": "l", "litre": "l", "litres": "l", "liter": "l", "liters": "l",
    "kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb", "mah": "mah", "w": "w", "kw": "kw",
    "kwh": "kwh", "v": "v", "hz": "hz", "ghz": "ghz", "mhz": "mhz",
    "ms": "ms", "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "day": "day", "days": "day", "week": "week", "weeks": "week",
    "month": "month", "months": "month", "year": "year", "years": "year",
    "am": "am", "a.m.": "am", "pm": "pm", "p.m.": "pm",
    "million": "million", "m.": "million", "billion": "billion", "bn": "billion",
    "thousand": "thousand", "k": "thousand",
}
_TITLES = {"dr", "mr", "mrs", "ms", "prof", "sir", "madam", "mx"}


@dataclass
class _Facts:
    """What a piece of text asserts, in checkable form."""

    content: list[str]  # stems of content words, in order (duplicates kept)
    numbers: list[tuple[str, str | None, str]]  # (value, unit, surface)
    entities: list[tuple[str, ...]]  # lower-cased capitalised phrases
    words: list[str]  # all lower-cased word tokens, in order (for phrase search)


def _unit_after(toks: list[Token], index: int) -> str | None:
    """The unit of the number at ``toks[index]``: a currency sign just before
    it, or a unit word/sign just after it ("25 km/h", "30%", "14-day")."""
    if index > 0 and toks[index - 1].kind == "cur" and toks[index - 1].start + 1 == toks[index].start:
        return _UNITS[toks[index - 1].text]
    if index + 1 < len(toks):
        nxt = toks[index + 1]
        if nxt.kind == "pct":
            return "%"
        if nxt.kind == "word":
            word = nxt.text.lower()
            if index + 3 < len(toks) and toks[index + 2].kind == "slash":
                pair = f"{word}/{toks[index + 3].text.lower()}"
                if pair in _UNITS:
                    return _UNITS[pair]
            if word in _UNITS:
                return _UNITS[word]
    return None


def _sentence_starts(text: str, toks: list, *, context_side: bool) -> set[int]:
    """Where sentences start: the first word's position, and in the context every sentence's."""
    sentence_starts = {0}
    if context_side:
        # every sentence start in the context, so their first words are not entities
        offset = 0
        for sentence in split_sentences(text):
            position = text.find(sentence, offset)
            if position >= 0:
                sentence_starts.add(position)
                offset = position + len(sentence)
    first_word_start = next((t.start for t in toks if t.kind in ("word", "num")), 0)
    sentence_starts.add(first_word_start)
    return sentence_starts


def _in_a_name(toks: list, index: int, raw: str, lower: str, sentence_starts: set[int]) -> bool:
    """Whether the word at ``index`` is part of a named-entity phrase: capitalised
    (not "I", not a lone capital), and not only because it starts a sentence."""
    if lower in STOP_WORDS:
        return False
    capitalised = raw[0].isupper() and lower != "i" and not (
        raw.isupper() and len(raw) == 1
    )
    at_start = toks[index].start in sentence_starts or (
        index > 0 and toks[index - 1].text in (":",)
    )
    if capitalised and at_start:
        # a sentence's first word is a name only if a capitalised word follows it
        nxt = toks[index + 1] if index + 1 < len(toks) else None
        return bool(nxt and nxt.kind == "word" and nxt.text[0].isupper())
    return capitalised and not at_start


def _facts(text: str, *, context_side: bool) -> _Facts:
    """Content words, numbers and named-entity phrases of one sentence (or of
    the whole context when ``context_side``)."""
    toks = tokens(text)
    content: list[str] = []
    numbers: list[tuple[str, str | None, str]] = []
    entities: list[tuple[str, ...]] = []
    words = [t.text.lower().replace("\u2019", "'") for t in toks if t.kind in ("word", "num")]
    words = [w[:-2] if w.endswith("'s") else w for w in words]
    sentence_starts = _sentence_starts(text, toks, context_side=context_side)

    run: list[str] = []

    def close_run() -> None:
        phrase = tuple(w for w in run if w not in _TITLES)
        if phrase:
            entities.append(phrase)
        run.clear()

    for index, tok in enumerate(toks):
        if tok.kind == "num":
            close_run()
            numbers.append((number_value(tok.text), _unit_after(toks, index), tok.text))
            continue
        if tok.kind != "word":
            if tok.kind != "slash":
                close_run()
            continue
        raw = tok.text.replace("\u2019", "'")
        lower = raw.lower()
        if lower.endswith("'s"):
            lower = lower[:-2]
        if lower in _WORD_NUMBERS and (context_side or lower != "one"):
            numbers.append((str(_WORD_NUMBERS[lower]), _unit_after(toks, index), raw))
            close_run()
            continue
        if _in_a_name(toks, index, raw, lower, sentence_starts):
            run.append(lower)
        else:
            close_run()
        if lower in STOP_WORDS or lower in _UNITS and not context_side:
            continue
        content.append(stem(lower))
    close_run()
    return _Facts(content, numbers, entities, words)


def _contains_phrase(words: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(tuple(words[i : i + n]) == phrase for i in range(len(words) - n + 1))


@dataclass(frozen=True)
class SentenceCheck:
    sentence: str
    checkable: bool
    supported: bool
    coverage: float
    missing_numbers: tuple[str, ...] = ()
    missing_entities: tuple[str, ...] = ()
    missing_words: tuple[str, ...] = ()


_IGNORED_STEMS = frozenset(stem(w) for w in CONVERSATIONAL | GENERIC)
_GREETING = re.compile(r"^\s*(hi|hello|hey|dear|thanks|thank you|cheers|best|regards|good (morning|afternoon|evening))\b", re.I)


@dataclass(frozen=True)
class _Passage:
    """One context sentence: its numbers and content stems, for locality checks."""

    numbers: dict[str, set[str | None]]
    stems: frozenset[str]


@dataclass(frozen=True)
class ContextIndex:
    facts: _Facts
    stems: frozenset[str]
    word_stems: list[str]
    numbers: dict[str, set[str | None]]
    passages: tuple[_Passage, ...]


def _number_units(numbers: Iterable[tuple[str, str | None, str]]) -> dict[str, set[str | None]]:
    out: dict[str, set[str | None]] = {}
    for value, unit, _ in numbers:
        out.setdefault(value, set()).add(unit)
    return out


def index_context(context: Sequence[str]) -> ContextIndex:
    text = "\n".join(str(item) for item in context if item)
    facts = _facts(text, context_side=True)
    passages = []
    for item in context:
        for sentence in split_sentences(str(item)):
            f = _facts(sentence, context_side=True)
            passages.append(
                _Passage(_number_units(f.numbers), frozenset(f.content) - _IGNORED_STEMS)
            )
    return ContextIndex(
        facts=facts,
        stems=frozenset(set(facts.content) | {stem(w) for w in facts.words}),
        word_stems=[stem(w) for w in facts.words],
        numbers=_number_units(facts.numbers),
        passages=tuple(passages),
    )


_CLAUSE = re.compile(r",\s+|;\s*|\s+(?:and|but|while|whereas)\s+|\s+\(|\)\s*", re.I)


def _unit_ok(unit: str | None, units: set[str | None]) -> bool:
    return unit is None or unit in units or None in units


def _missing_numbers(sentence: str, index: ContextIndex) -> list[str]:
    """Numbers of ``sentence`` the context does not back up.

    A number must be in the context with a compatible unit, and in a passage
    (context sentence) that shares a content word with the clause the number
    is in ("retried 4 times" is not backed by "since version 4.0"). A clause
    that shares fewer than two words with every passage is matched on the
    whole sentence instead; when nothing overlaps at all, being anywhere in
    the context is enough."""
    missing = []
    sentence_stems = set(_facts(sentence, context_side=False).content) - _IGNORED_STEMS
    for clause in _CLAUSE.split(sentence):
        facts = _facts(clause, context_side=False)
        if not facts.numbers:
            continue
        stems = set(facts.content) - _IGNORED_STEMS
        if max((len(stems & p.stems) for p in index.passages), default=0) < 2:
            stems = sentence_stems
        related = [p for p in index.passages if stems & p.stems]
        for value, unit, surface in facts.numbers:
            shown = surface if unit is None else f"{surface} {unit}"
            units = index.numbers.get(value)
            if units is None:
                missing.append(shown)
            elif not _unit_ok(unit, units):
                other = "/".join(sorted(u for u in units if u))
                missing.append(f"{shown} (the context has {value} {other})")
            elif related and not any(
                value in p.numbers and _unit_ok(unit, p.numbers[value]) for p in related
            ):
                missing.append(f"{shown} (in the context, but not where it talks about this)")
    return missing


def check_sentence(sentence: str, index: ContextIndex) -> SentenceCheck:
    facts = _facts(sentence, context_side=False)
    content = [w for w in facts.content if w not in _IGNORED_STEMS and len(w) > 1]
    short_greeting = bool(_GREETING.match(sentence)) and len(sentence.split()) <= 5
    if short_greeting or (not facts.numbers and not facts.entities and len(set(content)) < 2):
        return SentenceCheck(sentence, checkable=False, supported=True, coverage=1.0)

    missing_numbers = _missing_numbers(sentence, index)
    missing_entities = [
        " ".join(phrase)
        for phrase in facts.entities
        if not _contains_phrase(index.word_stems, tuple(stem(w) for w in phrase))
    ]
    unique = list(dict.fromkeys(content))
    missing_words = [w for w in unique if w not in index.stems]
    coverage = 1.0 - len(missing_words) / len(unique) if unique else 1.0
    words_ok = coverage >= COVERAGE_MIN or len(missing_words) <= MISSING_WORDS_ALLOWED
    supported = not missing_numbers and not missing_entities and words_ok
    return SentenceCheck(
        sentence,
        checkable=True,
        supported=supported,
        coverage=coverage,
        missing_numbers=tuple(missing_numbers),
        missing_entities=tuple(missing_entities),
        missing_words=tuple(missing_words),
    )


def check_output(output: str, context: Sequence[str]) -> list[SentenceCheck]:
    index = index_context(context)
    return [check_sentence(s, index) for s in split_sentences(output)]


def hallucination_judgement(output: str, context: Sequence[str] | None) -> tuple[float, list[str]]:
    """(score, reasons): 1.0 when any checkable sentence is unsupported, else
    0.0. Raises :class:`JudgeAbstained` without context."""
    # Blank items are no context, as in the metrics' input rules; a bare
    # string is one passage, not a list of characters.
    if isinstance(context, str):
        context = [context]
    items = [str(item) for item in (context or []) if item is not None and str(item).strip()]
    if not items:
        raise JudgeAbstained(ABSTAIN_NO_CONTEXT)
    checks = [c for c in check_output(output, items) if c.checkable]
    unsupported = [c for c in checks if not c.supported]
    if not checks:
        return 0.0, ["The output makes no checkable claim (no numbers, names or content words to look up)."]
    reasons = []
    for check in unsupported:
        missing = []
        if check.missing_numbers:
            missing.append("numbers not in the context: " + ", ".join(check.missing_numbers))
        if check.missing_entities:
            missing.append("names not in the context: " + ", ".join(check.missing_entities))
        if check.coverage < COVERAGE_MIN and len(check.missing_words) > MISSING_WORDS_ALLOWED:
            missing.append(
                f"only {check.coverage:.0%} of its content words are in the context "
                f"(missing: {', '.join(check.missing_words[:8])})"
            )
        reasons.append(f'Unsupported by the context: "{clip(check.sentence)}" ({"; ".join(missing)}).')
    if not unsupported:
        reasons.append(
            f"All {len(checks)} checkable sentence(s) are supported by the context "
            "(their numbers, names and content words appear in it)."
        )
    # The metric's scale (the seed's): 1 when anything is unsupported, partial
    # hallucinations included; the reasons say how many sentences are.
    if unsupported and len(checks) > 1:
        reasons.append(f"{len(unsupported)} of {len(checks)} checkable sentence(s) are unsupported.")
    return (1.0 if unsupported else 0.0), reasons
