"""The datacenter a Slurm cluster stands for (``--datacenter slurm:``), from ``sinfo --json``'s
nodes and ``scontrol show topology``: pure, no cluster needed (tests/engines/test_slurm.py
reads a real one)."""

from __future__ import annotations

import pytest

from cddlm.application.enactment.slurm import _comment_fields, ended, job_comment
from cddlm.application.enactment.slurmctl import Job
from cddlm.errors import BadArgument
from cddlm.placement import api
from cddlm.placement.slurm import datacenter, expand_hostlist, node_down, parse_topology

TOPOLOGY = """SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-2]
SwitchName=s2 Level=0 LinkSpeed=1 Nodes=n3
SwitchName=top Level=1 LinkSpeed=1 Nodes=n[1-3] Switches=s[1-2]
"""


def node(name, cpus=64, memory=4000, features="", state="idle", flags=(), reason=""):
    return {"name": name, "cpus": cpus, "real_memory": memory, "active_features": features,
            "state": state, "state_flags": list(flags), "reason": reason}


def test_hostlists_expand_as_slurm_writes_them():
    assert expand_hostlist("n[1-3,07],gpu1") == ["n1", "n2", "n3", "n07", "gpu1"]
    assert expand_hostlist("r[1-2]n[08-09]") == ["r1n08", "r1n09", "r2n08", "r2n09"]
    assert expand_hostlist("single") == ["single"]
    for bad in ("n[1-", "n[a-b]", "n[3-1]", "n[1-2]]"):
        with pytest.raises(BadArgument):
            expand_hostlist(bad)
    with pytest.raises(BadArgument, match="more than"):
        expand_hostlist("n[0-999]m[0-999]")


def test_switches_become_levels_and_the_network_tree():
    nodes = [node("n1", features="db,rackA"), node("n2", cpus=8, memory=1000), node("n3"),
             node("n4")]
    data = datacenter(nodes, parse_topology(TOPOLOGY), "c1")
    assert data["levels"] == ["cluster", "switch1", "switch0", "host"]
    assert data["resources"] == ["cpu", "memory"]
    root = data["location"]
    assert root["name"] == "c1"
    (top, loose) = root["children"]
    assert top["name"] == "top" and [s["name"] for s in top["children"]] == ["s1", "s2"]
    n1 = top["children"][0]["children"][0]
    assert n1 == {"name": "n1", "level": "host", "agent": "slurm:n1",
                  "capacity": {"cpu": 64, "memory": 4000}, "traits": ["db", "rackA"]}
    assert loose["name"] == "n4"          # in no switch: right below the cluster
    dc = api.load_datacenter(data)        # a valid datacenter, with hops over the switches
    assert dc.network.hops("n1", "n2") == 2 and dc.network.hops("n1", "n3") == 4
    assert dc.vertex_name(("level", "switch0"), dc.by_name["n2"]) == "s1"


def test_a_cluster_without_topology_is_its_nodes():
    data = datacenter([node("a"), node("b")], parse_topology(""))
    assert data["levels"] == ["cluster", "host"]
    assert [h["name"] for h in data["location"]["children"]] == ["a", "b"]
    api.load_datacenter(data)


def test_bad_clusters_are_refused_saying_why():
    with pytest.raises(BadArgument, match="no nodes"):
        datacenter([], [])
    with pytest.raises(BadArgument, match="must differ"):
        datacenter([node("s1")], parse_topology("SwitchName=s1 Level=0 Nodes=s1"))
    with pytest.raises(BadArgument, match="not described"):
        datacenter([node("n1")], parse_topology("SwitchName=top Level=1 Switches=s9"))


def test_down_and_not_responding_nodes_are_down_with_their_reason():
    assert node_down(node("n1")) is None
    assert node_down(node("n1", state="idle", flags=["DRAIN"])) is None
    assert node_down(node("n2", state="down", reason="disk on fire")) == \
        "node n2 is DOWN: disk on fire"
    assert node_down(node("n3", state="idle", flags=["NOT_RESPONDING"])) == \
        "node n3 is NOT_RESPONDING"


def test_job_ends_read_like_process_ends():
    def job(state, status, reason="None"):
        return Job(7, "cddlm-x", "", state, reason, "n2", 0, status, 100)
    assert ended(job("COMPLETED", 0)).exit_code == 0
    out = ended(job("FAILED", 3 << 8, "NonZeroExitCode"))
    assert out.exit_code == 3 and "exited with status 3 (job 7 on node n2)" == out.info
    out = ended(job("FAILED", 15, "JobLaunchFailure"))
    assert out.exit_signal == "SIGTERM" and "killed by signal SIGTERM" in out.info
    assert "the node failed: disk on fire" in ended(job("NODE_FAIL", 0), "disk on fire").info
    assert "ended TIMEOUT (TimeLimit)" in ended(job("TIMEOUT", 0, "TimeLimit")).info


def test_the_comment_says_whose_job_it_is():
    comment = job_comment("urn:uuid:1", 3, "web/a b")
    assert _comment_fields(comment) == {"app": "urn:uuid:1", "gen": "3", "path": "web/a b"}
    assert _comment_fields("someone else's job") == {}


# -- Slurm not answering: no cluster needed -------------------------------------------------------
def failing_slurm(folder, monkeypatch, said: str = "slurm_load_jobs error: Unable to contact slurm controller"):
    """Slurm's commands, each failing as they do when the controller is away."""
    for name in ("sbatch", "squeue", "scancel", "sinfo", "scontrol"):
        path = folder / name
        path.write_text("#!/bin/sh\necho '%s' >&2\nexit 1\n" % said)
        path.chmod(0o755)
    monkeypatch.setenv("SLURM_BIN", str(folder))


def test_a_silent_controller_defers_starts_and_stops_and_fails_nothing(tmp_path, monkeypatch):
    from cddlm.application.enactment.local import Later, Target
    from cddlm.application.enactment.slurm import SlurmRunner
    from cddlm.application.enactment.slurmctl import Slurm
    from cddlm.application.hosts import Host
    from cddlm.config import Settings
    failing_slurm(tmp_path, monkeypatch)
    runner = SlurmRunner(Slurm(timeout=5), str(tmp_path / "slurm"), Settings()).add(Host("n1", "slurm"))
    t = Target("urn:uuid:x", "w", "process", {"argv": ["sleep", "1"]}, "n1")
    assert runner.node("n1") == "n1"
    for many in (runner.start_many, runner.stop_many):
        with pytest.raises(Later, match="Unable to contact slurm controller"):
            many([(1, t, 5, "slurm:100")], lambda: None, lambda pairs: None)
    assert runner.check(t, 5, "slurm:100") is None      # silence is not the job's failure


def test_a_portal_on_no_slurm_says_what_is_missing(tmp_path, monkeypatch):
    from cddlm.app import Portal
    from cddlm.config import Settings
    from cddlm.errors import ConfigurationError
    (tmp_path / "bin").mkdir()
    failing_slurm(tmp_path / "bin", monkeypatch)
    with pytest.raises(ConfigurationError, match="--datacenter slurm: cannot read the cluster: "
                                                 "scontrol failed .*Unable to contact"):
        Portal(Settings(state_dir=str(tmp_path / "state"), datacenter_file="slurm:"))
    with pytest.raises(ConfigurationError, match="write slurm: alone"):
        Portal(Settings(state_dir=str(tmp_path / "state3"), datacenter_file="slurm:main"))
    monkeypatch.setenv("SLURM_BIN", str(tmp_path / "empty"))
    with pytest.raises(ConfigurationError, match="must be a Slurm submit host"):
        Portal(Settings(state_dir=str(tmp_path / "state2"), datacenter_file="slurm:"))


def test_a_cancel_of_jobs_that_ended_meanwhile_is_no_failure(tmp_path, monkeypatch):
    from cddlm.application.enactment.slurmctl import Slurm, SlurmUnavailable
    failing_slurm(tmp_path, monkeypatch, "scancel: error: Kill job error on job id 5: "
                                         "Job/step already completing or completed")
    Slurm().cancel([5], "TERM")
    failing_slurm(tmp_path, monkeypatch, "scancel: error: Unable to contact slurm controller")
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        Slurm().cancel([5])
