"""A real Prometheus scrapes a live portal with users (an operator's token) through a deploy,
a failure and a terminate, and its HTTP API has the series (issue 31, Metrics); promtool
accepts what the portal serves."""

from __future__ import annotations

import subprocess
import urllib.request

from tests.cli.helpers import descriptor, process
from tests.ops.prometheus import Prometheus, promtool


def test_prometheus_follows_a_deploy_a_failure_and_a_terminate(live_portal, tmp_path):
    from cddlm.application.users import UsersFile
    tool = promtool()
    users = UsersFile(str(tmp_path / "users.json"))
    users.add("ops", "ops-secret-1", "admin")
    token = users.new_token("ops", "prometheus")
    lp = live_portal(extra=["--users", users.path, "--insecure"])
    base = lp.url.rsplit("/cddlm/", 1)[0]
    env = {"CDDLM_TOKEN": token}
    folder = tmp_path / "prometheus"
    folder.mkdir()
    prom = Prometheus(folder, base.split("//", 1)[1], token=token)
    try:
        assert prom.wait_for('up{job="cddlm"} == 1')
        # the census is there before anything is deployed, every state counted
        assert len(prom.wait_for('cddlm_applications == 0')) == 5

        run(["deploy", "examples/hello.xml", "--name", "web"], lp, env)
        prom.wait_for('cddlm_applications{state="running"} == 1')
        prom.wait_for('cddlm_components{state="running",host="localhost"} == 2')
        created = prom.wait_for('cddlm_requests_total{endpoint="portal",operation="create",'
                                'outcome="ok"} == 1')
        assert created[0]["metric"]["instance"] == base.split("//", 1)[1]
        prom.wait_for('cddlm_request_duration_seconds_sum{operation="initialize"} > 0')
        prom.wait_for('histogram_quantile(0.99, cddlm_request_duration_seconds_bucket'
                      '{operation="initialize"}) > 0')

        broken = descriptor(tmp_path / "broken.xml", process("crash", ["sh", "-c", "exit 7"]))
        run(["deploy", str(broken), "--name", "broken"], lp, env, ok=False)
        prom.wait_for('cddlm_applications{state="failed"} == 1')
        prom.wait_for('cddlm_components{state="failed",host="localhost"} == 1')

        run(["terminate", "web"], lp, env)
        prom.wait_for('cddlm_applications{state="terminated"} == 1')
        prom.wait_for('cddlm_applications{state="running"} == 0')
        prom.wait_for('max_over_time(cddlm_applications{state="running"}[5m]) == 1')
        prom.wait_for('cddlm_engine_claimed_items_total{action="stop"} >= 2')
        prom.wait_for('cddlm_store_round_trip_seconds_count > 0')
        prom.wait_for('cddlm_host_up{host="localhost"} == 1')
        prom.wait_for('cddlm_engine_queue_depth{state="waiting"} == 0')
        # nothing of a tenant's in any series: no application name or id among the labels
        series = prom.query('{job="cddlm"}')
        values = {v for s in series for k, v in s["metric"].items()}
        assert not {"web", "broken"} & values and not any("urn:uuid" in v for v in values)
    finally:
        prom.stop()
    request = urllib.request.Request(base + "/metrics", headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, timeout=10) as r:
        text = r.read()
    done = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0 and not done.stdout and not done.stderr, done


def run(args: list[str], lp, env: dict, ok: bool = True) -> None:
    import os
    import sys
    from tests.conftest import ROOT
    done = subprocess.run([sys.executable, "-m", "cddlm.cli", "--portal", lp.url, *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, **env))
    assert (done.returncode == 0) == ok, done.stderr
