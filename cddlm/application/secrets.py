"""Values a descriptor marks secret, kept out of everything the portal returns.

A descriptor marks values secret (HOT's ``hidden: true`` parameters, ``secret="true"`` in the
native language, ``cmp:secret="true"`` in CDL); the resolved ``Deployment`` records their paths
(``secrets``) and the deploy-time properties whose values are secret (``secret_properties``).
They are stored and given to the components, and never returned: ``resolve`` answers
``HIDDEN`` in their place, ``visible_properties`` leaves them out of the properties that
``api:deploymentInfo``, the dashboard and its JSON show (they list the hidden names instead),
and ``redact_descriptor`` masks the literal secrets of a descriptor's text before it is shown.
"""

from __future__ import annotations

from typing import Any

from cddlm import ns
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
    """``value`` (found at ``path``) with every secret in it replaced by ``HIDDEN``."""
    if not tree.secrets:
        return value
    path = path.strip("/")
    if path in tree.secrets or any(path.startswith(s + "/") for s in tree.secrets):
        return HIDDEN
    if isinstance(value, dict):
        return {k: redact(tree, path + "/" + str(k), v) for k, v in value.items()}
    return value


MASK = "********"


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
    for el in root.iter():
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
