"""Values only known on the host: lazy properties, host facts and other components' runtime
values (pid, port, workdir ...). Used when a component is enacted and by ``resolve``.
"""

from __future__ import annotations

import socket
from typing import Any, Callable

from cddlm.application.enactment import procfs
from cddlm.errors import ResolutionError
from cddlm.lang.model import Component as Node, Deployment, Lazy, quoted

# the runtime values ``resolve`` adds to a component's attributes
RESOLVED_RUNTIME = ("pid", "host", "workdir", "port", "state", "exit_code", "location", "job", "node")
# every runtime value a reference may name (besides what a runner records in ``runtime``)
RUNTIME_NAMES = RESOLVED_RUNTIME + ("ports", "exit_signal", "restarts")


class HostValues:
    def __init__(self, app: Any, tree: Deployment, rows: dict, host: str, component: str,
                 workdir: Callable[[str], str],
                 ports: Callable[[str | None, int, str | None], list[int]] | None = None,
                 hostname: Callable[[], str] | None = None,
                 elsewhere: Callable[[str], Callable[[str, str], Any] | None] | None = None,
                 on_node: Callable[[Any], tuple[int | None, list[int]] | None] | None = None):
        self.app = app
        # the runtime values of a component another portal runs (a host portal's): for its host,
        # a way to ask that portal (path, name) -> the value, None while it has none
        self.elsewhere = elsewhere or (lambda host: None)
        self.hostname = hostname or socket.gethostname    # the machine the component runs on
        # a process's listening ports where none were recorded (host, pid, start time): asked
        # of /proc here, or of the runner of the host it runs on when that is another machine
        self.ports = ports or (lambda host, pid, started: procfs.listening_ports(pid)
                               if procfs.alive(pid, started) else [])
        # a component's pid on the node it runs on and its ports there, where its host's
        # runner knows them from the process's own report (a Slurm job's watcher: the pid
        # recorded is the job's id); None for the other hosts
        self.on_node = on_node or (lambda row: None)
        self.tree = tree
        self.rows = rows            # path -> repository.Component
        self.host = host
        self.component = component
        self.workdir = workdir      # path -> the component's directory on its host

    # -- host facts and properties ------------------------------------------------------------
    def fact(self, name: str) -> Any:
        hostname = self.hostname()
        facts = {"host.name": self.host, "host.hostname": hostname, "local.hostname": hostname,
                 "app.id": self.app.id, "app.name": self.app.name or "",
                 "component.path": self.component, "component.workdir": self.workdir(self.component)}
        return facts.get(name)

    def property(self, name: str) -> Any:
        if name in (self.app.properties or {}):
            return self.app.properties[name]
        return self.fact(name)

    # -- references ---------------------------------------------------------------------------
    def runtime(self, path: str, name: str) -> Any:
        row = self.rows.get(path)
        if row is None:
            return None
        ask = self.elsewhere(row.host or "")
        if ask is not None:
            return ask(path, name)
        if name in ("pid", "port", "ports"):
            there = self.on_node(row)       # (pid on its node, ports there), or None
            if name == "pid":
                return there[0] if there is not None else row.pid
            ports = there[1] if there is not None else list(row.runtime.get("ports") or []) or (
                self.ports(row.host, row.pid, row.pid_start) if row.pid else [])
            return (ports[0] if ports else None) if name == "port" else ports
        if name == "state":
            return row.observed
        if name in ("exit_code", "exit_signal", "restarts"):
            return getattr(row, name)
        if name == "host":
            return row.host
        if name == "workdir":
            return row.workdir or row.runtime.get("workdir")
        return row.runtime.get(name)

    def reference(self, target: str, seen: frozenset = frozenset()) -> Any:
        """The value ``target`` names (``Deployment.split_target``): an attribute, a runtime
        value, or a part of one (``w/env/PGPASSWORD``)."""
        if target in seen:
            raise ResolutionError("lazy reference loop through %s" % target, kind="reference-loop",
                                  path=target)
        at = self.tree.split_target(target)
        comp_path, name = at.component, at.name
        node = self.tree.find(comp_path)
        seen = seen | {target}
        if name in node.attributes and node.attributes[name] is not None:
            # select in the value as given, resolving only the lazy parts on the way
            return self.value(at.select(node.attributes[name], lambda v: self.value(v, seen),
                                        secret=self.tree.within_secret), seen)
        value = self.runtime(comp_path, name)
        if value is None:
            row = self.rows.get(comp_path)
            if name not in node.attributes and name not in RUNTIME_NAMES and row is not None \
                    and name not in row.runtime:
                # not a value that is still to come: one that will never be
                raise ResolutionError("%s does not exist: %s has no attribute or runtime value of "
                                      "that name (attributes: %s; runtime values: %s)" % (
                                          quoted(target), comp_path, ", ".join(sorted(node.attributes))
                                          or "none", ", ".join(RESOLVED_RUNTIME)),
                                      kind="unresolved-reference", path=target)
            raise ResolutionError("%s has no value yet on host %s" % (quoted(target), self.host),
                                  kind="unresolved-reference", path=target)
        # a runtime list may still gain the item (a port opened later): asked again; a key a
        # runtime map lacks never comes (recorded whole)
        return at.select(value, runtime=True, secret=self.tree.within_secret)

    # -- any value -----------------------------------------------------------------------------
    def value(self, v: Any, seen: frozenset = frozenset()) -> Any:
        if isinstance(v, Lazy):
            if v.kind == "ref":
                out = self.reference(v.target, seen)
            else:
                out = self.property(v.target)
                if out is None:
                    out = v.default
                if out is None:
                    raise ResolutionError("property %s is not set (host %s)" % (v.target, self.host),
                                          kind="missing-property", path=v.target)
            if v.integer:
                try:
                    return int(str(out).strip())
                except ValueError:
                    raise ResolutionError("%s must be an integer, got %r" % (v.target, out),
                                          kind="bad-property", path=v.target) from None
            return out
        if isinstance(v, list):
            return [self.value(x, seen) for x in v]
        if isinstance(v, dict):
            return {k: self.value(x, seen) for k, x in v.items()}
        return v

    def attributes(self, node: Node, lenient: bool = False) -> dict[str, Any]:
        """Every attribute resolved; ``lenient`` leaves a runtime value that does not exist yet
        as None (deploying a process needs its executable, not its peers' pids)."""
        out = {}
        for k, v in node.attributes.items():
            try:
                out[k] = self.value(v)
            except ResolutionError as e:
                if not (lenient and e.kind == "unresolved-reference"):
                    raise
                out[k] = None
        return out
