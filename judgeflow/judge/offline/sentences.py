"""Text primitives the offline judge's steps share: sentence splitting (keeps
abbreviations, initials and decimals together), tokens (numbers, currency
signs, words), light stemming and clipping text for a reason."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "mt", "ft", "vs", "etc", "e.g", "i.e",
    "eg", "ie", "approx", "no", "nos", "inc", "ltd", "co", "corp", "dept", "fig", "vol",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    "a.m", "p.m", "u.s", "u.k", "e.u", "min", "max", "est", "cf", "al", "ave", "rd", "gen",
}
# abbreviations that often end a sentence too: split when a capital follows
_CAN_END = {"etc", "a.m", "p.m", "inc", "ltd", "co", "corp", "no", "min", "max", "approx"}
_TERMINATOR = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*(?=\s|$)")
_BULLET = re.compile(r"^\s*(?:[-*\u2022>]+|\d+[.)])\s+")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences: at line breaks, and after ``.``/``!``/``?``
    followed by white space, except after abbreviations ("Dr.", "e.g."),
    initials ("J. K.") and when the next word starts in lower case after a
    period. Decimals and version numbers ("3.2", "$1.8") never split because a
    terminator must be followed by white space."""
    sentences: list[str] = []
    for line in (text or "").splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        start = 0
        for match in _TERMINATOR.finditer(line):
            end = match.end()
            mark = match.group(0)
            rest = line[end:].lstrip()
            if not rest:
                continue  # the line's end closes the sentence anyway
            if "!" not in mark and "?" not in mark:
                before = line[start:match.start()].split()
                raw_word = before[-1].strip("(\"'\u201c\u2018") if before else ""
                word = raw_word.lower()
                if word in _CAN_END and rest[0].isupper():
                    pass  # "... at 5 p.m. Then ..." ends a sentence
                elif word in _ABBREVIATIONS or (len(raw_word) == 1 and raw_word.isupper()):
                    continue  # "Dr. Okafor", "J. K. Rowling" (but "48 g. Hope" ends)
                elif "." in word and all(len(part) <= 1 for part in word.split(".")):
                    continue  # "e.g" "U.S" style
                if rest[0].islower():
                    continue
            piece = line[start:end].strip()
            if piece:
                sentences.append(piece)
            start = end
        piece = line[start:].strip()
        if piece:
            sentences.append(piece)
    return sentences


# numbers (thousands separators, decimals, clock times), currency signs, words
_TOKEN = re.compile(
    r"(?P<cur>[$\u20ac\u00a3])"
    r"|(?P<num>\d+(?:[.,:]\d+)*)"
    r"|(?P<word>[A-Za-z]+(?:['\u2019][A-Za-z]+)*)"
    r"|(?P<pct>%)"
    r"|(?P<slash>/)"
)


@dataclass(frozen=True)
class Token:
    kind: str  # "num" | "word" | "cur" | "pct" | "slash"
    text: str
    start: int


def tokens(text: str) -> list[Token]:
    return [Token(m.lastgroup or "", m.group(0), m.start()) for m in _TOKEN.finditer(text)]


def number_value(text: str) -> str:
    """Canonical form of a number token: '5,200' -> '5200', '07:40' -> '7:40',
    '3.20' -> '3.2'. Version-like '3.2.1' stays as is."""
    if ":" in text:
        return ":".join(str(int(part)) for part in text.split(":") if part.isdigit())
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
        text = text.replace(",", "")
    text = text.replace(",", ".") if text.count(",") == 1 and len(text.split(",")[1]) != 3 else text
    if text.count(".") == 1:
        whole, frac = text.split(".")
        frac = frac.rstrip("0")
        return f"{int(whole)}.{frac}" if frac else str(int(whole))
    if text.isdigit():
        return str(int(text))
    return text


def stem(word: str) -> str:
    """Light suffix stripping, enough for "returned"/"returns"/"return" and
    "restored"/"restore" to meet; not a full Porter stemmer."""
    w = word.lower().replace("\u2019", "'")
    if w.endswith("'s"):
        w = w[:-2]
    w = w.strip("'")
    for suffix, keep in (("ies", "y"), ("ied", "y"), ("sses", "ss"), ("ing", ""), ("edly", ""), ("ed", ""),
                         ("ly", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not (suffix == "s" and w.endswith("ss")):
            w = w[: -len(suffix)] + keep
            break
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]  # "stopped" -> "stopp" -> "stop"
    return w


def clip(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"
