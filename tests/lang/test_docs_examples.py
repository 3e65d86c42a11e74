"""The examples in docs/languages.md resolve as the text there says."""

from __future__ import annotations

import re
from pathlib import Path

from cddlm.lang.model import Lazy
from tests.lang.helpers import resolve_cdl, resolve_hot

DOC = Path(__file__).resolve().parents[2] / "docs" / "languages.md"


def blocks(language: str) -> list[str]:
    return re.findall(r"```%s\n(.*?)```" % language, DOC.read_text(), re.S)


def test_the_complete_cdl_example():
    (example,) = [b for b in blocks("xml") if "<cdl:cdl" in b and "cmp:group" in b]
    dep = resolve_cdl(example, properties={"db.port": "6000"}, check=True).deployment
    assert [p for p, _ in dep.walk()] == ["db", "site", "site/web1", "site/web2"]
    assert dep.find("db").attributes["env"] == {"PGPORT": "6000"}
    web1 = dep.find("site/web1").attributes
    assert web1["readiness"] == {"tcp": "6080"}
    assert web1["env"] == {"DB_PORT": "6000", "DB_PID": Lazy("ref", "db/pid"),
                           "HOST": Lazy("property", "local.hostname")}
    assert dep.find("site/web2").attributes["restart"] == "on-failure"
    assert [(g.name, g.members) for g in dep.groups] == [("web", ["site/web1", "site/web2"])]
    assert [p.type for p in dep.policies] == ["anti-collocation"]


def test_the_hot_example():
    (example,) = [b for b in blocks("yaml") if b.startswith("heat_template_version")
                  and "OS::Nova::Server" in b]      # the reference's, not the short overview's
    dep = resolve_hot(example).deployment
    assert dep.find("db").attributes["argv"] == ["postgres", "-p", "5432"]
    assert dep.find("web").attributes["env"] == {"DB_PID": Lazy("ref", "db/pid"),
                                                 "HOST": Lazy("property", "local.hostname")}
    assert dep.find("vm").attributes["demand"] == {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
    (policy,) = dep.policies
    assert (policy.type, policy.hard, policy.params["group"]) == ("anti-collocation", False, "app")
