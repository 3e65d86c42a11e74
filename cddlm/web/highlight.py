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

# XML: a first pass finds comments, CDATA, processing instructions and whole tags (each match
# ends at the next "<" at the latest, so the pass is linear); a second splits each tag
_XML = re.compile(r"(?P<comment><!--.*?(?:-->|\Z))|(?P<cdata><!\[CDATA\[.*?(?:\]\]>|\Z))"
                  r"|(?P<pi><\?[^<]*?(?:\?>|(?=<)|\Z))|(?P<tag><[^<>]*>?)", re.S)
_TAG = re.compile(r"""(?P<tag>^</?[^\s<>/=]*)|(?P<value>"[^"]*"|'[^']*')|(?P<punct>/?>$|=)""")
_NAME = re.compile(r"[^\s=\"'/>]+")

# YAML: a key only at the start of a line (after indentation and list dashes), then values
_YAML_KEY = re.compile(r"^(?P<lead>[ \t]*(?:-[ \t]+)*)(?P<key>[^\s#'\"\[\]{},:&*!|>%@`-][^:#\n]*?)"
                       r"(?=:(?:[ \t]|$))", re.M)
_YAML = re.compile(r"""
    (?P<comment>(?:(?<=\s)|^)\#[^\n]*)
  | (?P<value>"(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*')
  | (?P<number>(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]))
  | (?P<literal>(?<![\w.])(?:true|false|null|yes|no|~)(?![\w.]))
  | (?P<punct>[:\[\]{},]|^[ \t]*-(?=\s))
""", re.M | re.X)


def _tokens(pattern: re.Pattern, text: str, inner=None) -> list[Token]:
    out: list[Token] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.extend(inner(text[pos:m.start()]) if inner else [("text", text[pos:m.start()])])
        if m.end() > m.start():
            out.extend(_tag(m.group()) if m.lastgroup == "tag" and pattern is _XML
                       else [(m.lastgroup or "text", m.group())])
        pos = m.end()
    if pos < len(text):
        out.extend(inner(text[pos:]) if inner else [("text", text[pos:])])
    return out


def _names(text: str) -> list[Token]:
    """Between a tag's values: attribute names and the spaces around them."""
    return _tokens(_NAME, text) if text.strip() else [("text", text)]


def _tag(text: str) -> list[Token]:
    return [("attr" if kind == "text" and text_.strip() else kind, text_)
            for kind, text_ in _tokens(_TAG, text, _names)]


def _yaml(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    for m in _YAML_KEY.finditer(text):
        out.extend(_tokens(_YAML, text[pos:m.start("key")]))
        out.append(("key", m.group("key")))
        pos = m.end()
    out.extend(_tokens(_YAML, text[pos:]))
    return [t for t in out if t[1]]


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
        return _yaml(text)
    return [("text", text)] if text else []
