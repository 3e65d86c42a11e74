"""GET /metrics (issue 31, Metrics): the counters the layers keep and the store's counts, in
the Prometheus text format, for administrators only when there are users, and with no
tenant's names or ids in it."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from cddlm import metrics
from tests.cli.helpers import cddlm, descriptor, popen, process
from tests.conftest import free_port


def scrape(base: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(base + "/metrics")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def samples(text: str) -> dict[tuple, float]:
    """{(name, ((label, value), ...)): value} of every sample."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def delivered(found: dict, dead: int) -> float:
    """Notifications delivered to consumers other than the one on port ``dead``."""
    return sum(v for (name, labels), v in found.items()
               if name == "cddlm_notification_delivery_seconds_count"
               and ("consumer_host", "127.0.0.1:%d" % dead) not in labels)


def test_a_portal_counts_what_it_does_and_names_no_tenant(live_portal, tmp_path):
    lp = live_portal(extra=["--max-log-bytes", "4096"])
    base = lp.url.rsplit("/cddlm/", 1)[0]
    dead = free_port()      # a consumer nobody listens on: its deliveries fail
    watchers = [popen("watch", "--listen", "127.0.0.1:0", portal=lp.url),
                popen("watch", "--listen", "127.0.0.1:0", "--callback", "http://127.0.0.1:%d/" % dead,
                      portal=lp.url)]
    try:
        flood = descriptor(tmp_path / "flood.xml", process(
            "chatty", ["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x | fold -w 99; sleep 600"]))
        cddlm("deploy", str(flood), "--name", "tenant-secret-name", portal=lp.url)
        failing = descriptor(tmp_path / "fails.xml", process("broken", ["sh", "-c", "exit 3"]))
        cddlm("deploy", str(failing), "--name", "another-secret", check=False, portal=lp.url)
        assert cddlm("status", "no-such-app", check=False, portal=lp.url).returncode == 1
        app_id = cddlm("status", "tenant-secret-name", portal=lp.url).stdout.split("id:")[1].split()[0]
        deadline = time.monotonic() + 30
        while True:     # the capper's rotation and the deliveries, failed or not, come in their time
            status, ctype, text = scrape(base)
            found = samples(text)
            if (value(found, "cddlm_log_rotations_total") or 0) >= 1 and \
                    (value(found, "cddlm_notification_delivery_failures_total",
                           consumer_host="127.0.0.1:%d" % dead) or 0) >= 1 and \
                    delivered(found, dead) >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for w in watchers:
            w.terminate()
            w.communicate(timeout=20)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
    assert value(found, "cddlm_requests_total", endpoint="portal", operation="create", outcome="ok") == 2
    assert value(found, "cddlm_requests_total", endpoint="application", operation="initialize",
                 outcome="ok") == 2
    assert (value(found, "cddlm_request_duration_seconds_count", endpoint="portal",
                  operation="create") or 0) == 2
    assert [k for k in found if k[0] == "cddlm_requests_total" and ("outcome", "ok") not in k[1]], \
        "a refused request is counted with its fault"
    assert value(found, "cddlm_applications", state="running") == 1
    assert value(found, "cddlm_applications", state="failed") == 1
    assert value(found, "cddlm_components", state="running", host="localhost") == 1
    assert value(found, "cddlm_host_up", host="localhost") == 1
    assert value(found, "cddlm_engine_claimed_items_total", action="start") >= 2
    assert value(found, "cddlm_engine_batch_items_count") >= 2
    assert value(found, "cddlm_store_round_trip_seconds_count") > 10
    assert value(found, "cddlm_log_rotations_total") >= 1
    assert value(found, "cddlm_notification_delivery_failures_total",
                 consumer_host="127.0.0.1:%d" % dead) >= 1
    assert delivered(found, dead) >= 1, "the watcher that listens got its notifications"
    assert value(found, "process_resident_memory_bytes") > 0
    for secret in ("tenant-secret-name", "another-secret", app_id, app_id.split(":")[-1], "admin"):
        assert secret not in text
    cddlm("terminate", "tenant-secret-name", portal=lp.url)


def test_with_users_the_metrics_are_an_administrators(live_portal, tmp_path):
    from cddlm.application.users import UsersFile
    users = UsersFile(str(tmp_path / "users.json"))
    users.add("ops", "ops-secret-1", "admin")
    users.add("alice", "alice-secret-1", "user")
    ops, alice = users.new_token("ops", "prometheus"), users.new_token("alice", "hers")
    lp = live_portal(extra=["--users", users.path, "--insecure"])
    base = lp.url.rsplit("/cddlm/", 1)[0]
    status, _, text = scrape(base)
    assert status == 401 and "authentication required" in text
    status, _, text = scrape(base, alice)
    assert status == 403 and "administrator" in text
    assert scrape(base, "not-a-token")[0] == 401
    status, _, text = scrape(base, ops)
    assert status == 200
    assert value(samples(text), "cddlm_authentication_failures_total") >= 1
    with urllib.request.urlopen(base + "/healthz", timeout=10) as r:     # no credentials needed
        assert r.status == 200


def test_consumer_hosts_past_the_cap_are_counted_as_other():
    metrics.configure(2)
    try:
        for host in ("cap-a:1", "user:secret@cap-b:2", "cap-c:3", "cap-a:1"):
            metrics.delivered(host, 0.01, failed=True)
    finally:
        metrics.configure(100)
    found = samples(metrics.exposition(None).decode())
    failures = {dict(labels)["consumer_host"]: v for (name, labels), v in found.items()
                if name == "cddlm_notification_delivery_failures_total"}
    assert failures["cap-a:1"] == 2 and failures["cap-b:2"] == 1 and "cap-c:3" not in failures
    assert failures[metrics.OTHER] >= 1
    assert not [h for h in failures if "secret" in h]


def test_promtool_accepts_the_exposition():
    from tests.ops.prometheus import promtool
    tool = promtool()
    census = metrics.Census(applications={"running": 2}, components={("running", "h1"): 3},
                            queue={"waiting": 0, "claimed": 1}, outbox={"queued": 4},
                            hosts_up={"h1": True, "h2": False}, lease_ages={"h2": 12.5})
    done = subprocess.run([tool, "check", "metrics"], input=metrics.exposition(census),
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and not done.stdout and not done.stderr, done
