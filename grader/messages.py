"""Every message a learner reads, in English and Chinese (zh-CN), keyed by a message id.

Each module declares its own messages next to the code that shows them, and gets a function that renders one in
the language in force:

    from .messages import catalogue
    T = catalogue("reports", {
        "pass": ("PASSED: all {n} cases. Well done.", "通过：全部 {n} 个用例都对了。"),
    })
    T("pass", n=12)          # the id is "reports.pass"
    T.later("pass", n=12)    # a Text: rendered each time str() is called (for module-level tables)

Render when the message is shown, never at import time: the language is chosen at run time. Case names stay
English inside the grader (code and tests select cases by name); chapter modules register their Chinese names
with case_names({...}) and reports show case_label(name).

An entry is a pair (English, Chinese) with the same {placeholders}; tests/test_messages.py checks every entry, and
that no grader module shows a sentence outside a catalogue. Terms follow the glossary (solutions/zh-CN/GLOSSARY.md).

The language: grader.setup(lang="zh") (the Chinese notebooks call it so), else FA_COURSE_LANG, else English.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable, Iterable

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
    render.later = lambda key, **values: Text(f"{namespace}.{key}", **values)  # type: ignore[attr-defined]
    # a hint ladder's steps, in order: T.steps("a_1", "a_2") is (T.later("a_1"), T.later("a_2"))
    render.steps = lambda *keys: tuple(Text(f"{namespace}.{k}") for k in keys)  # type: ignore[attr-defined]
    return render


def say(msg_id: str, **values: object) -> str:
    """The message `msg_id` in the language in force, with `values` filled in."""
    lang = language()
    text = CATALOGUE[msg_id][lang]
    if not (values or fields(text)):
        return text
    return fill_zh(text, values) if lang == "zh" else text.format(**values)


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[A-Za-z0-9_]")


def fill_zh(text: str, values: dict[str, object]) -> str:
    """str.format for a Chinese text, spacing each placeholder's value as Chinese typesetting wants it: one space
    between a Chinese character and a Latin letter or digit ("当前环境是 CPU 上的…", "消费者 0 在…"), none between
    two Chinese characters ("生产者在…", for a template written "{actor} 在…" to suit both)."""
    formatter = string.Formatter()
    pieces: list[tuple[str, bool]] = []  # (text, is a value)
    for literal, name, spec, conv in formatter.parse(text):
        if literal:
            pieces.append((literal, False))
        if name is not None:
            value, _ = formatter.get_field(name, (), values)
            value = formatter.convert_field(value, conv)
            pieces.append((formatter.format_field(value, formatter.vformat(spec or "", (), values)), True))
    out = ""
    for i, (piece, is_value) in enumerate(pieces):
        if not piece:
            continue
        at_value = is_value or (i > 0 and pieces[i - 1][1])
        if out and at_value:
            if (piece.startswith(" ") and not is_value and len(piece) > 1 and _HAN.match(piece[1])
                    and _HAN.match(out[-1])):
                piece = piece[1:]  # "{actor} 在" with actor = 生产者
            elif (out.endswith(" ") and is_value and len(out) > 1 and _HAN.match(out[-2])
                  and _HAN.match(piece[0])):
                out = out[:-1]  # "块 {x}" with x = 中文
            elif (_HAN.match(out[-1]) and _WORD.match(piece[0])) or (_WORD.match(out[-1]) and _HAN.match(piece[0])):
                piece = " " + piece
        out += piece
    return out


def join(items: Iterable[object], sep: str = ", ") -> str:
    """`sep.join(items)` in the language in force: a Chinese list is joined with 、 (", ") or ； ("; ")."""
    if language() == "zh":
        sep = {", ": "、", "; ": "；"}.get(sep, sep)
    return sep.join(str(item) for item in items)


class Text:
    """A message rendered when it is shown, not when it is made (module-level tables: hints, bug names...)."""

    __slots__ = ("msg_id", "values")

    def __init__(self, msg_id: str, **values: object) -> None:
        self.msg_id, self.values = msg_id, values

    def __str__(self) -> str:
        return say(self.msg_id, **self.values)

    def __repr__(self) -> str:
        return f"Text({self.msg_id!r})"


def later(render: Callable[..., str], key: str, **values: object) -> Text:
    """T.later-style: the message `key` of the catalogue behind `render`, rendered each time it is shown."""
    return Text(f"{render.namespace}.{key}", **values)  # type: ignore[attr-defined]


# ---- case names: kept in English inside the grader (code and tests select cases by them), shown translated
#: English case name -> Chinese, registered by each chapter module with case_names({...})
CASE_NAMES: dict[str, str] = {}
_SUFFIXES = [  # what the checking loop and the exercises append to a case's name
    (re.compile(r"^(?P<base>.*), again with fresh values$"),
     ("{base}, again with fresh values", "{base}（同形状、新数值再测一次）")),
    (re.compile(r"^(?P<base>.*) \(draw (?P<n>\d+)\)$"), ("{base} (draw {n})", "{base}（第 {n} 次抽样）")),
    (re.compile(r"^(?P<base>.*) \(hidden\)$"), ("{base} (hidden)", "{base}（隐藏用例）")),
    (re.compile(r"^bad arguments: (?P<base>.*)$"), ("bad arguments: {base}", "非法参数：{base}")),
    (re.compile(r"^(?P<base>.*) \((?P<tail>(?:block_m|n_q)=[^()]*)\)$"), ("{base} ({tail})", "{base}（{tail}）")),
]


def case_names(names: dict[str, str]) -> None:
    """Register Chinese names for English case names (the same name may come from several modules, alike)."""
    for en, zh in names.items():
        if CASE_NAMES.get(en, zh) != zh:
            raise RuntimeError(f"case name {en!r} has two translations: {CASE_NAMES[en]!r} and {zh!r}")
        CASE_NAMES[en] = zh


def case_label(name: str) -> str:
    """A case's name in the language in force (English names are the grader's own, so English is the identity)."""
    if language() == "en":
        return name
    if name in CASE_NAMES:
        return CASE_NAMES[name]
    for pattern, (_, zh) in _SUFFIXES:
        m = pattern.match(name)
        if m:
            values = m.groupdict()
            values["base"] = case_label(values["base"])
            return zh.format(**values)
    return name


# ---- text layout: Chinese text lines up with English in a terminal's columns
def width(text: str) -> int:
    """How many terminal columns `text` takes: East Asian wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def ljust(text: str, n: int) -> str:
    """str.ljust by terminal columns (Chinese text lines up with English)."""
    return text + " " * max(n - width(text), 0)
