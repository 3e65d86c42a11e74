"""Syntax highlighting of descriptors for the page: text in, ``(kind, text)`` tokens out, which
the template writes as escaped ``<span class="tok-KIND">`` (so the descriptor's own markup is
never markup of the page). Pure and linear: one regular expression pass per language.

XML (the native language and CDL): tags, attribute names and values, comments, processing
instructions, CDATA and text. YAML (HOT): comments, keys, strings, numbers, booleans and the
punctuation. Anything else stays plain text.
"""

from __future__ import annotations

import re

from cddlm import ns
from cddlm.errors import UnsupportedLanguage
from cddlm.lang import registry

Token = tuple[str, str]

# one alternative per token kind; text between matches is plain
_XML = re.compile(r"""
    (?P<comment><!--.*?(?:-->|\Z))
  | (?P<cdata><!\[CDATA\[.*?(?:\]\]>|\Z))
  | (?P<pi><\?.*?(?:\?>|\Z))
  | (?P<tag></?[^\s<>/!?]+)
  | (?P<value>"[^"<\n]*"|'[^'<\n]*')
  | (?P<attr>[^\s<>="'/]+(?=\s*=))
  | (?P<punct>/?>|=)
""", re.S | re.X)

_YAML = re.compile(r"""
    (?P<comment>(?:(?<=\s)|^)\#[^\n]*)
  | (?P<key>[^\s#'"\[\]{},:][^\n:#]{0,200}?(?=:(?:\s|$)))
  | (?P<value>"(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*')
  | (?P<number>(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]))
  | (?P<literal>(?<![\w.])(?:true|false|null|yes|no|~)(?![\w.]))
  | (?P<punct>[:\[\]{},]|^\s*-(?=\s))
""", re.M | re.X)



def _tokens(pattern: re.Pattern, text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append(("text", text[pos:m.start()]))
        if m.end() > m.start():
            out.append((m.lastgroup or "text", m.group()))
        pos = m.end()
    if pos < len(text):
        out.append(("text", text[pos:]))
    return out


def kind_of(language: str | None, text: str) -> str:
    """``xml``, ``yaml`` or ``text``: from the language URI, else from the text itself."""
    try:
        known = registry.get(language or "")
    except UnsupportedLanguage:
        known = None
    if known is not None and known.body == "xml":
        return "xml"
    if known is not None and known.uri == ns.HOT:
        return "yaml"
    return "xml" if text.lstrip().startswith("<") else "text"


def highlight(language: str | None, text: str) -> list[Token]:
    kind = kind_of(language, text)
    if kind == "xml":
        return _tokens(_XML, text)
    if kind == "yaml":
        return _tokens(_YAML, text)
    return [("text", text)] if text else []
