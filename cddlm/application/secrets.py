"""Values a descriptor marks secret, kept out of everything the portal returns.

A descriptor marks values secret (HOT's ``hidden: true`` parameters, ``secret="true"`` in the
native language, ``cmp:secret="true"`` in CDL); the resolved ``Deployment`` records their paths
(``secrets``), the deploy-time properties whose values are secret (``secret_properties``) and
the secret strings the language met (``secret_values``). They are stored and given to the
components, and never returned: ``resolve`` answers ``HIDDEN`` in their place,
``visible_properties`` leaves them out of the properties that ``api:deploymentInfo``, the
dashboard and its JSON show (they list the hidden names instead), and ``redact_descriptor``
masks the literal secrets of a descriptor's text before it is shown. A share a front portal
sends a host portal carries the marks (``native.to_xml`` with ``Deployment.secrets``), so the
host portal keeps the same values secret.

Texts made from secret values (a readiness check's "waiting for log /PATTERN/", a failure
"not ready after 30s: ...", a validation fault quoting a value) are masked by what they
contain, not by where they come from: a ``Concealer`` holds one application's secret strings
(``Deployment.secret_strings``) and replaces each one standing anywhere in a text by ``MASK``.
Each way out masks in one place: component state where the engine records it (``info``, the
stderr tail: what stateInfo, terminationInfo, the history and the notifications are made of),
a waiting component's ``waitingFor`` where it is worded, an error of a descriptor where it is
resolved and initialized (``concealing``, before any fault is built or logged), and the
portal's log lines in its log handlers (``LogFilter``, with the secrets of every tree the
portal holds).
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from cddlm import ns
from cddlm.errors import CddlmError
from cddlm.lang.model import Deployment


class Hidden:
    """Stands for a secret value in what the portal returns."""

    def __repr__(self) -> str:
        return "HIDDEN"


HIDDEN = Hidden()


def secret_properties(deployment_json: dict | None) -> set[str]:
    return set((deployment_json or {}).get("secretProperties", ()))


def visible_properties(properties: dict | None, deployment_json: dict | None) -> tuple[dict, list[str]]:
    """The deploy-time properties that may be shown, and the names of those that may not."""
    hidden = secret_properties(deployment_json)
    props = properties or {}
    return ({k: v for k, v in props.items() if k not in hidden},
            sorted(k for k in props if k in hidden))


def redact(tree: Deployment, path: str, value: Any) -> Any:
    """``value`` (found at ``path``) with every secret in it replaced by ``HIDDEN``, and any
    secret string standing in what is left masked."""
    if not tree.secrets:
        return of(tree).value(value)
    if tree.within_secret(path):        # (any spelling of the path)
        return HIDDEN
    if isinstance(value, dict):
        return {k: redact(tree, path + "/" + str(k), v) for k, v in value.items()}
    return of(tree).value(value)


MASK = "********"


class Concealer:
    """Masks secret strings wherever they stand in a text (the longest first, so a value that
    holds another is masked whole)."""

    def __init__(self, values: Iterable[str]):
        self.values = tuple(sorted({v for v in values if v}, key=lambda v: (-len(v), v)))
        self._pattern = re.compile("|".join(map(re.escape, self.values))) if self.values else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str | None) -> str | None:
        if not text or self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def value(self, value: Any) -> Any:
        """A value with every string in it masked."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def error(self, e: CddlmError) -> CddlmError:
        """``e`` with its texts masked (its message, and where it says a place or a cause)."""
        if self._pattern is not None:
            e.message = self(e.message)
            e.args = (e.message,)
            for name in ("path", "file", "cause"):
                if isinstance(getattr(e, name, None), str):
                    setattr(e, name, self(getattr(e, name)))
        return e


NOTHING = Concealer(())
LOGGED_MIN_CHARS = 4     # shorter secrets are not masked in log lines (they would mask words)
_logged: "weakref.WeakSet[Concealer]" = weakref.WeakSet()   # of every tree the portal holds
_logged_lock = threading.Lock()


def of(tree: Deployment | None) -> Concealer:
    """The concealer of an application's tree (made once per tree, kept with it); from then
    on, as long as the tree lives, log lines are masked with its secrets too."""
    if tree is None:
        return NOTHING
    found = tree.derived.get("concealer")
    if found is None:
        strings = tree.secret_strings()
        found = tree.derived["concealer"] = Concealer(strings) if strings else NOTHING
        long = [v for v in strings if len(v) >= LOGGED_MIN_CHARS]
        logged = found if len(long) == len(strings) else Concealer(long)
        if logged:
            tree.derived["logged"] = logged         # lives as long as the tree
            with _logged_lock:
                _logged.add(logged)
    return found


@contextmanager
def concealing(*sources: Any) -> Iterator[None]:
    """Mask the secrets of ``sources`` (trees, or collections of secret strings; a callable
    is asked for them when an error comes) in any ``CddlmError`` raised inside."""
    try:
        yield
    except CddlmError as e:
        values: set[str] = set()
        for source in sources:
            source = source() if callable(source) else source
            if isinstance(source, Deployment):
                values.update(source.secret_strings())
            elif source:
                values.update(source)
        raise Concealer(values).error(e)


class LogFilter(logging.Filter):
    """Masks, in every record a handler writes, the secret strings of every tree the portal
    holds (of at least ``LOGGED_MIN_CHARS`` characters): a log line never says one, whatever
    text or error it quotes."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _logged_lock:
            masks = list(_logged)
        if not masks:
            return True
        message = masked = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        for mask in masks:
            masked = mask(masked)
            record.exc_text = mask(record.exc_text)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def redact_descriptor(language: str | None, text: str | None) -> str | None:
    """A stored descriptor as it may be shown: the literal values it marks secret masked (an
    XML element marked ``secret``/``cmp:secret`` loses its content, a hidden HOT parameter its
    ``default``). A descriptor that cannot be read again is not shown at all."""
    if not text or not _may_hold_secrets(language, text):
        return text
    try:
        if language == ns.HOT:
            return _redact_hot(text)
        return _redact_xml(text)
    except Exception:   # noqa: BLE001 - whatever it is, it is not shown
        return "(not shown: the descriptor marks secrets and could not be masked)"


def _may_hold_secrets(language: str | None, text: str) -> bool:
    return "hidden" in text if language == ns.HOT else "secret" in text


def _redact_xml(text: str) -> str:
    from lxml import etree
    from cddlm import xmlsafe
    root = xmlsafe.parse(text)
    for el in list(root.iter()):    # (a list: emptying an element would end the walk there)
        if not isinstance(el.tag, str):
            continue
        marked = el.get("secret") if etree.QName(el).namespace == ns.NATIVE else None
        marked = marked or el.get("{%s}secret" % ns.CMP)
        if (marked or "").strip().lower() in ("true", "1"):
            for child in list(el):
                el.remove(child)
            el.text = MASK
    return etree.tostring(root, encoding="unicode")


def _redact_hot(text: str) -> str:
    """Mask the ``default`` of each hidden parameter where it stands in the text (by the YAML
    parser's marks), keeping the rest of the template as written."""
    import yaml
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    spans = []
    params = _child(root, "parameters")
    if isinstance(params, yaml.MappingNode):
        for _, spec in params.value:
            hidden = _child(spec, "hidden")
            default = _child(spec, "default")
            if hidden is not None and default is not None and \
                    str(getattr(hidden, "value", "")).lower() in ("true", "yes", "on"):
                spans.append((default.start_mark.index, default.end_mark.index))
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + '"%s"' % MASK + text[end:]
    return text


def _child(node, key: str):
    if not hasattr(node, "value") or not isinstance(node.value, list):
        return None
    for k, v in node.value:
        if getattr(k, "value", None) == key:
            return v
    return None
