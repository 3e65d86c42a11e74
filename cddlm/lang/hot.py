"""HOT templates with policy groups (language ``urn:cddlm:lang:hot:1``; docs/languages.md).

A Heat Orchestration Template in YAML or JSON: ``heat_template_version``, ``parameters``
(deploy-time properties, ``hot_values``), ``resources`` mapped onto the component library, and
the ``groups`` section of the Heat policy extension's Proposal A with policies and
relationships on groups and resources (``hot_groups``).

Resource types:

| type | component |
|---|---|
| ``CDDLM::Process``, ``CDDLM::File``, ``CDDLM::Probe``, ``CDDLM::Delegate`` | that type; properties are its attributes |
| ``CDDLM::Compound``, ``CDDLM::Sequence``, ``CDDLM::Parallel`` | a container; ``children: [{get_resource: R}, ...]`` |
| ``OS::Nova::Server`` | a process: ``sh -c USER_DATA`` (or ``sleep infinity``, holding its place), demand from the flavor |
| ``OS::Cinder::Volume``, ``AWS::EC2::Volume`` | a file ``volumes/NAME`` with demand ``DISK_GB: size`` |
| ``OS::Cinder::VolumeAttachment``, ``AWS::EC2::VolumeAttachment`` | no component: relates its server and volume, for its policies |

Resource names become component names, with characters outside ``[A-Za-z0-9_.-]`` replaced
by ``_``; a resource inside a container is addressed ``container/name``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from cddlm import ns
from cddlm.errors import DescriptorError
from cddlm.lang import hot_groups, hot_values, hot_yaml, policies
from cddlm.lang.hot_yaml import error, line_of
from cddlm.lang.model import (Component, Deployment, Resolution, ResolveRequest, strings_of,
                              value_to_json)

TOP_KEYS = {"heat_template_version", "description", "parameter_groups", "parameters", "resources",
            "outputs", "groups"}
RESOURCE_KEYS = {"type", "properties", "policies", "relationships", "depends_on", "metadata",
                 "deletion_policy", "update_policy"}
CDDLM_TYPES = {"CDDLM::" + t.capitalize(): t for t in
               ("process", "file", "probe", "delegate", "compound", "sequence", "parallel")}
CONTAINERS = {"compound", "sequence", "parallel"}
SERVERS = {"OS::Nova::Server"}
VOLUMES = {"OS::Cinder::Volume": "size", "AWS::EC2::Volume": "Size"}
ATTACHMENTS = {"OS::Cinder::VolumeAttachment": ("instance_uuid", "volume_id"),
               "AWS::EC2::VolumeAttachment": ("InstanceId", "VolumeId")}
# Nova's standard flavors, in Placement's resource classes
FLAVORS = {"m1.tiny": (1, 512, 1), "m1.small": (1, 2048, 20), "m1.medium": (2, 4096, 40),
           "m1.large": (4, 8192, 80), "m1.xlarge": (8, 16384, 160)}
# Nova server properties that mean nothing for a process on a host
NOVA_IGNORED = {"image", "key_name", "security_groups", "networks", "metadata", "name",
                "availability_zone", "user_data_format", "config_drive", "admin_pass",
                "personality", "block_device_mapping", "block_device_mapping_v2",
                "scheduler_hints", "software_config_transport", "diskConfig", "tags"}
UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass
class Resource:
    name: str
    type: str
    raw: dict
    line: int | None
    component_type: str | None = None   # None: an attachment, which is no component
    kind: str = ""                      # for policy relevance (policies.relevant)
    component: Component | None = None
    path: str | None = None
    children: list[str] = field(default_factory=list)
    attached: tuple[str, str] | None = None   # (server, volume) of an attachment


class _Hot:
    uri = ns.HOT
    name = "HOT with policy groups"
    version = "1"
    body = "text"

    def resolve(self, request: ResolveRequest) -> Resolution:
        template = Template(request)
        template.grouping.check_refused()
        return Resolution(template.deployment, template.display, tuple(sorted(template.used)))


class Template:
    """One template, resolved: ``deployment``, ``applications`` (every primitive policy
    application, as the extension defines them) and ``used`` (properties read)."""

    def __init__(self, request: ResolveRequest):
        source = request.source
        if isinstance(source, dict):
            data = source
        else:
            if not isinstance(source, (str, bytes)):
                raise DescriptorError("a HOT template is text (YAML or JSON)", kind="not-well-formed")
            if len(source) > request.limits.max_template_bytes:
                raise DescriptorError("the template is larger than %d bytes"
                                      % request.limits.max_template_bytes, kind="too-large")
            data = hot_yaml.load(source, max_nodes=request.limits.max_resolved_nodes,
                                 quote=request.quotes(request.base_url))
        if not isinstance(data, dict):
            raise DescriptorError("a HOT template is a mapping", kind="invalid-template")
        if "heat_template_version" not in data:
            # not a template: say so without quoting what it holds (it may be any file)
            raise error("not a HOT template: heat_template_version is missing", "", line_of(data),
                        "invalid-template")
        unknown = sorted(set(map(str, data)) - TOP_KEYS)
        if unknown:
            raise error("unknown top-level section %s" % ", ".join(unknown), "", line_of(data),
                        "invalid-template")
        self.data = data
        self.limits = request.limits
        hidden = hot_values.hidden(data.get("parameters"))
        request.secret_values.update(hot_values.hidden_values(data.get("parameters"),
                                                              request.properties, hidden))
        params, self.used = hot_values.parameters(data.get("parameters"), request.properties,
                                                  request.limits)
        request.secret_values.update(s for name in hidden for s in strings_of(params[name]))
        self.resources = self.read_resources(data.get("resources"))
        self.build_tree()
        self.evaluate = hot_values.Evaluator(params, {r.name: r.path for r in self.resources.values()},
                                             hidden=hidden,
                                             max_value_chars=request.limits.max_value_chars)
        self.deployment = Deployment([r.component for r in self.resources.values()
                                      if r.component is not None and "/" not in r.path])
        for r in self.resources.values():
            self.fill(r)
        outputs = data.get("outputs") or {}
        if not isinstance(outputs, dict):
            raise error("outputs must be a mapping", "outputs", line_of(data), "invalid-template")
        self.evaluate(outputs, "outputs")
        grouping = hot_groups.Grouping(self.resources, self.evaluate)
        grouping.read(data.get("groups"))
        self.deployment.groups = grouping.groups
        self.deployment.policies = grouping.policies
        self.deployment.secrets = self.secret_values(self.evaluate.secret_paths)
        self.deployment.secret_properties = hidden
        self.applications = grouping.applications
        self.grouping = grouping

    def secret_values(self, template_paths: set[str]) -> set[str]:
        """The component value paths (``web/env/PGPASSWORD``, ``web/argv``) where hidden
        parameters were used, from the template paths of those uses. A use outside a
        resource's properties (outputs, groups) is no component value."""
        out = set()
        for where in template_paths:
            parts = where.split("/")
            if len(parts) < 4 or parts[0] != "resources" or parts[2] != "properties":
                continue
            r = self.resources.get(parts[1])
            if r is None or r.path is None:
                continue
            attr = parts[3].split("[", 1)[0]
            if r.type in SERVERS:           # user_data becomes argv
                attr = "argv"
            key = parts[4].split("[", 1)[0] if len(parts) > 4 and "[" not in parts[3] else None
            out.add("/".join([r.path, attr] + ([key] if key else [])))
        return out

    # -- resources -----------------------------------------------------------------------------
    def read_resources(self, section: Any) -> dict[str, Resource]:
        if not isinstance(section, dict) or not section:
            raise error("resources must be a non-empty mapping", "resources", line_of(self.data),
                        "invalid-template")
        out: dict[str, Resource] = {}
        names: dict[str, str] = {}
        for name, raw in section.items():
            where = "resources/%s" % name
            if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
                raise error("a resource is a mapping with a type", where, line_of(section),
                            "invalid-template")
            unknown = sorted(set(raw) - RESOURCE_KEYS)
            if unknown:
                raise error("unknown resource key %s" % ", ".join(unknown), where, line_of(raw),
                            "invalid-template")
            r = Resource(str(name), raw["type"], raw, line_of(raw))
            r.component_type, r.kind = self.classify(r)
            if r.component_type is not None:
                cname = UNSAFE_NAME.sub("_", r.name)[:128] or "_"
                if cname in names:
                    raise error("resources %s and %s both become component %s" % (
                        names[cname], r.name, cname), where, r.line, "duplicate-name")
                names[cname] = r.name
                r.component = Component(cname, r.component_type, source="line %s" % r.line)
            out[r.name] = r
        return out

    def classify(self, r: Resource) -> tuple[str | None, str]:
        if r.type in CDDLM_TYPES:
            ctype = CDDLM_TYPES[r.type]
            return ctype, policies.kind_of(ctype)
        if r.type in SERVERS:
            return "process", "compute"
        if r.type in VOLUMES:
            return "file", "volume"
        if r.type in ATTACHMENTS:
            return None, "attachment"
        known = sorted(CDDLM_TYPES) + sorted(SERVERS) + sorted(VOLUMES) + sorted(ATTACHMENTS)
        raise error("unknown resource type %s (known: %s)" % (r.type, ", ".join(known)),
                    "resources/%s/type" % r.name, r.line, "unknown-resource-type")

    def properties(self, r: Resource) -> dict:
        props = r.raw.get("properties") or {}
        if not isinstance(props, dict):
            raise error("properties must be a mapping", "resources/%s/properties" % r.name, r.line,
                        "invalid-template")
        return props

    def reference(self, value: Any, r: Resource, key: str) -> str:
        """A ``{get_resource: NAME}`` used for structure (container children, attachments)."""
        where = "resources/%s/properties/%s" % (r.name, key)
        if not (isinstance(value, dict) and set(value) == {"get_resource"}):
            raise error("%s must be {get_resource: NAME} (resources outside the template are not "
                        "supported)" % key, where, line_of(value) or r.line, "bad-function")
        name = value["get_resource"]
        if not isinstance(name, str) or name not in self.resources:
            raise error("get_resource: unknown resource %r" % name, where, r.line, "bad-function")
        return name

    def build_tree(self) -> None:
        """Container children and attachments, from literal get_resource references."""
        parent: dict[str, str] = {}
        for r in self.resources.values():
            props = self.properties(r)
            if r.component_type in CONTAINERS:
                children = props.get("children", [])
                if not isinstance(children, list):
                    raise error("children is a list", "resources/%s/properties/children" % r.name,
                                r.line, "invalid-template")
                for child in children:
                    name = self.reference(child, r, "children")
                    if name in parent or self.resources[name].component is None:
                        raise error("%s cannot be a child here (it is in %s already, or is no "
                                    "component)" % (name, parent.get(name, "no container")),
                                    "resources/%s/properties/children" % r.name, r.line,
                                    "invalid-template")
                    parent[name] = r.name
                    r.children.append(name)
            elif r.type in ATTACHMENTS:
                server_key, volume_key = ATTACHMENTS[r.type]
                keys = {k.lower(): k for k in props}
                refs = [props.get(keys.get(k.lower(), k)) for k in (server_key, volume_key)]
                r.attached = (self.reference(refs[0], r, server_key),
                              self.reference(refs[1], r, volume_key))
        for r in self.resources.values():
            if r.component is not None and r.name not in parent:
                self.place(r, "", 1)
        for r in self.resources.values():   # what no root reaches is in a cycle
            if r.component is not None and r.path is None:
                raise error("containers contain each other through %s" % r.name,
                            "resources/%s" % r.name, r.line, "containment-loop")

    def place(self, r: Resource, prefix: str, depth: int) -> None:
        if depth > self.limits.max_descriptor_depth:
            raise error("containers nested deeper than %d" % self.limits.max_descriptor_depth,
                        "resources/%s" % r.name, r.line, "too-deep")
        r.path = prefix + r.component.name
        for name in r.children:
            child = self.resources[name]
            r.component.children.append(child.component)
            self.place(child, r.path + "/", depth + 1)

    def fill(self, r: Resource) -> None:
        """Evaluate the properties and set the component's attributes."""
        where = "resources/%s/properties" % r.name
        props = {k: v for k, v in self.properties(r).items()
                 if not (k == "children" and r.component_type in CONTAINERS)}
        values = self.evaluate(props, where, r.line)
        depends = r.raw.get("depends_on") or []
        for name in depends if isinstance(depends, list) else [depends]:
            if not isinstance(name, str) or name not in self.resources:
                raise error("depends_on names unknown resource %r" % name,
                            "resources/%s/depends_on" % r.name, r.line, "invalid-template")
        if r.component is None:
            return
        if r.type in SERVERS:
            values = self.server(r, values, where)
        elif r.type in VOLUMES:
            values = self.volume(r, values, where)
        r.component.attributes = values

    def server(self, r: Resource, props: dict, where: str) -> dict:
        unknown = sorted(set(props) - NOVA_IGNORED - {"flavor", "user_data"})
        if unknown:
            raise error("unsupported server property %s" % ", ".join(unknown), where, r.line,
                        "invalid-template")
        flavor = props.get("flavor")
        if not isinstance(flavor, str) or flavor not in FLAVORS:
            raise error("flavor must be one of %s, not %r" % (", ".join(FLAVORS), flavor),
                        where + "/flavor", r.line, "invalid-attribute")
        vcpu, memory, disk = FLAVORS[flavor]
        user_data = props.get("user_data")
        argv = ["/bin/sh", "-c", user_data] if user_data else ["sleep", "infinity"]
        return {"argv": argv, "demand": {"VCPU": vcpu, "MEMORY_MB": memory, "DISK_GB": disk},
                "description": "OS::Nova::Server %s (%s)" % (r.name, flavor)}

    def volume(self, r: Resource, props: dict, where: str) -> dict:
        size_key = VOLUMES[r.type]
        size = props.get(size_key)
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
            raise error("%s must be a positive number of GB" % size_key, where + "/" + size_key,
                        r.line, "invalid-attribute")
        return {"path": "volumes/%s" % r.component.name, "content": "", "substitute": False,
                "demand": {"DISK_GB": size}, "description": "%s %s" % (r.type, r.name)}

    # -- the printed form ----------------------------------------------------------------------
    def display(self) -> str:
        out: dict[str, Any] = {"heat_template_version": str(self.data["heat_template_version"])}
        out["resources"] = {r.name: {"type": r.type, "component": r.path,
                                     **({"attributes": value_to_json(r.component.attributes)}
                                        if r.component is not None else
                                        {"attached": list(r.attached or ())})}
                            for r in self.resources.values()}
        out["groups"] = [{"name": g.name, "members": g.members} for g in self.deployment.groups]
        out["policies"] = [p.to_json() for p in self.deployment.policies]
        out["applications"] = [{"type": a.type, "hard": a.hard, "members": list(a.members),
                                **dict(a.params)} for a in self.applications]
        return yaml.safe_dump(out, sort_keys=False, default_flow_style=False)


def expand_pairs(source: Any, properties: dict[str, str] | None = None) -> list[policies.Application]:
    """The primitive policy applications a template (text or data) or a ``Deployment`` stands
    for: symmetric pairs sorted, asymmetric pairs ordered, monadic ones alone, group-wide
    policies with every member. From a template this is the extension's definition, every
    policy type included; from a deployment it is what the solver is asked for."""
    if isinstance(source, Deployment):
        return policies.expand(source)
    return Template(ResolveRequest(source=source, properties=properties or {})).applications


LANGUAGE = _Hot()
