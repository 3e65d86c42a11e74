"""Turning a descriptor (inline, text, file or reference) into a checked ``Deployment``.

The I/O around the pure languages: reading files, choosing the language, building the loader.
"""

from __future__ import annotations

import json
import os
import pathlib

from cddlm import ns
from cddlm.config import Limits
from cddlm.errors import BadArgument, DescriptorError, ResolutionError
from cddlm.lang import library, registry
from cddlm.lang.model import Resolution, ResolveRequest
from cddlm.application import secrets
from cddlm.application.loader import Loader

EXTENSIONS = {".cdl": ns.CDL, ".xml": ns.NATIVE, ".yaml": ns.HOT, ".yml": ns.HOT, ".json": ns.HOT}


def guess_language(path: str) -> str:
    return EXTENSIONS.get(os.path.splitext(path)[1].lower(), ns.NATIVE)


def resolve(source, language: str, *, base_url: str | None = None, properties=None,
            loader: Loader | None = None, limits: Limits | None = None, version: str | None = None,
            require_components: bool = True, own_files: bool = False) -> Resolution:
    """Resolve and check a descriptor, reading its imports through ``loader`` (by default
    none but the component library). ``require_components=False`` is for resolving only
    (``cddlm lang resolve``): a valid document that declares no components is accepted, and
    the components it does declare are still checked against the library."""
    limits = limits or Limits()
    lang = registry.get(language, version)
    request = ResolveRequest(source=source, base_url=base_url,
                                      properties=dict(properties or {}),
                                      loader=loader or Loader(max_bytes=limits.max_body_bytes),
                                      limits=limits, own_files=own_files)
    result = None
    # an error never quotes a secret: those the language met, and those of the tree it made
    with secrets.concealing(request.secret_values, lambda: result and result.deployment):
        result = lang.resolve(request)
        result.deployment.secret_values |= request.secret_values
        library.check(result.deployment, limits=limits, require_components=require_components)
    return result


def resolve_file(path: str, *, language: str | None = None, properties=None,
                 import_path: tuple[str, ...] = (), require_components: bool = True,
                 limits: Limits | None = None) -> Resolution:
    """Resolve a descriptor file on this machine (``cddlm lang resolve``), as the user running
    the command: its imports may be any regular file that user can read, and its errors quote
    them (the parser's reason for a syntax error, the names it found)."""
    limits = limits or Limits()
    loader = Loader(import_path, allowed_dirs=(os.sep,), max_bytes=limits.max_body_bytes)
    try:
        data = loader(os.path.abspath(path))
    except ResolutionError as e:
        raise BadArgument("cannot read %s" % e.message) from None
    language = language or guess_language(path)
    lang = registry.get(language)
    source = data if lang.body == "xml" else data.decode("utf-8", errors="replace")
    try:
        return resolve(source, language, base_url=pathlib.Path(path).resolve().as_uri(),
                       properties=properties, loader=loader, limits=limits,
                       require_components=require_components, own_files=True)
    except (DescriptorError, ResolutionError) as e:
        if not e.file:
            e.file = path
        raise


def load_data_file(path: str) -> dict:
    """A YAML or JSON file (placement inputs, HOT templates) as plain data."""
    import yaml
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise BadArgument("cannot read %s: %s" % (path, e.strerror or e)) from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise BadArgument("%s is not valid %s: %s" % (path, "JSON" if path.endswith(".json") else "YAML", e)) from None
    if not isinstance(data, dict):
        raise BadArgument("%s must hold a mapping at the top level" % path)
    return data
