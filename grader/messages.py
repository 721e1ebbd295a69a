"""Every message a learner reads, in English and Chinese (zh-CN), keyed by a message id.

Each module declares its own messages next to the code that shows them, and gets a function that renders one in
the language in force:

    from .messages import catalogue
    T = catalogue("reports", {
        "pass": ("PASSED: all {n} cases. Well done.", "通过：全部 {n} 个用例都对了。"),
    })
    T("pass", n=12)          # the id is "reports.pass"

An entry is a pair (English, Chinese) with the same {placeholders}; tests/test_messages.py checks every entry, and
that no grader module shows a sentence outside a catalogue. Terms follow the glossary (solutions/zh-CN/GLOSSARY.md).

The language: grader.setup(lang="zh") (the Chinese notebooks call it so), else FA_COURSE_LANG, else English.
"""

from __future__ import annotations

import string
from collections.abc import Callable

from . import config

LANGUAGES = ("en", "zh")
_ALIASES = {"en": "en", "en-us": "en", "en-gb": "en", "zh": "zh", "zh-cn": "zh", "zh-hans": "zh", "cn": "zh"}

#: message id -> {"en": text, "zh": text}
CATALOGUE: dict[str, dict[str, str]] = {}
_chosen: str | None = None


def normalise(lang: str | None) -> str | None:
    """"zh", "zh-CN", "zh_cn", "ZH" ... -> "zh"; "en"... -> "en"; None -> None; anything else: ValueError."""
    if lang is None:
        return None
    key = str(lang).strip().lower().replace("_", "-")
    if key not in _ALIASES:
        raise ValueError(f"lang must be one of {', '.join(LANGUAGES)} (or zh-CN), got {lang!r}")
    return _ALIASES[key]


def language() -> str:
    """The language in force: the one grader.setup(lang=...) chose, else FA_COURSE_LANG, else English."""
    if _chosen is not None:
        return _chosen
    try:
        return normalise(config.LANG.value()) or "en"
    except ValueError:
        return "en"


def set_language(lang: str | None) -> None:
    """Choose the language (None: back to FA_COURSE_LANG or English)."""
    global _chosen
    _chosen = normalise(lang)


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def catalogue(namespace: str, entries: dict[str, tuple[str, str]]) -> Callable[..., str]:
    """Register `entries` under `namespace` and return T(key, **values) -> the message in the language in force."""
    for key, pair in entries.items():
        msg_id = f"{namespace}.{key}"
        if msg_id in CATALOGUE:
            raise RuntimeError(f"message id {msg_id!r} is defined twice")
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(s, str) and s for s in pair)):
            raise RuntimeError(f"message {msg_id!r}: expected a pair of non-empty strings (English, Chinese)")
        if fields(pair[0]) != fields(pair[1]):
            raise RuntimeError(f"message {msg_id!r}: the two texts use different placeholders "
                               f"({sorted(fields(pair[0]))} vs {sorted(fields(pair[1]))})")
        CATALOGUE[msg_id] = {"en": pair[0], "zh": pair[1]}

    def render(key: str, **values: object) -> str:
        return say(f"{namespace}.{key}", **values)
    render.namespace = namespace  # type: ignore[attr-defined]
    return render


def say(msg_id: str, **values: object) -> str:
    """The message `msg_id` in the language in force, with `values` filled in."""
    text = CATALOGUE[msg_id][language()]
    return text.format(**values) if values or fields(text) else text
