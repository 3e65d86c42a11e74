"""What authentication costs a request.

    .venv/bin/python benchmarks/auth_overhead.py [--requests 2000]

Starts two portals on loopback (``cddlm portal serve``, SQLite under a temporary folder): one
in local mode, one with a users file (and ``--run-as nobody`` when run as root). One client
sends prebuilt raw envelopes (GetResourceProperty of ``wsrf-rl:CurrentTime`` on the portal)
over one keep-alive connection and times each request, for: local mode (the floor: no
authentication at all), HTTP Basic, Bearer, WS-Security UsernameToken PasswordText, and
PasswordDigest (a fresh nonce per request, so each one also writes its nonce to the store).

Printed: requests per second, p50 and p99 per form, and what one scrypt check costs (what a
client pays once per ``Settings.security.credential_cache`` seconds, and what the rate limit
bounds an attacker to: ``failures_per_minute`` checks per address and minute).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BODY = ('<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
        'xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2">wsrf-rl:CurrentTime</wsrf-rp:GetResourceProperty>')
WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
WSU = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
UTP = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0"


def envelope(header: str = "") -> bytes:
    return ('<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/">'
            '<soapenv:Header>%s</soapenv:Header><soapenv:Body>%s</soapenv:Body></soapenv:Envelope>'
            % (header, BODY)).encode()


def token(user: str, secret: str, digest: bool) -> str:
    if not digest:
        return ('<wsse:Security xmlns:wsse="%s"><wsse:UsernameToken><wsse:Username>%s</wsse:Username>'
                '<wsse:Password Type="%s#PasswordText">%s</wsse:Password></wsse:UsernameToken>'
                '</wsse:Security>' % (WSSE, user, UTP, secret))
    nonce = os.urandom(16)
    created = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    value = base64.b64encode(hashlib.sha1(nonce + created.encode() + secret.encode()).digest()).decode()
    return ('<wsse:Security xmlns:wsse="%s" xmlns:wsu="%s"><wsse:UsernameToken><wsse:Username>%s'
            '</wsse:Username><wsse:Password Type="%s#PasswordDigest">%s</wsse:Password><wsse:Nonce>%s'
            '</wsse:Nonce><wsu:Created>%s</wsu:Created></wsse:UsernameToken></wsse:Security>'
            % (WSSE, WSU, user, UTP, value, base64.b64encode(nonce).decode(), created))


def start(folder: str, extra: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", "0",
                             "--state-dir", folder] + extra, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    line = proc.stdout.readline().decode()
    if not line.startswith("portal ready at "):
        proc.kill()
        raise SystemExit("the portal did not start: %r" % line)
    return proc, int(line.split(":")[2].split("/")[0])


def measure(port: int, n: int, make: callable) -> tuple[float, float, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    begin = time.perf_counter()
    for _ in range(n):
        body, headers = make()
        t = time.perf_counter()
        conn.request("POST", "/cddlm/portal", body=body, headers=dict(headers, **{
            "Content-Type": "text/xml; charset=utf-8"}))
        r = conn.getresponse()
        r.read()
        times.append(time.perf_counter() - t)
        if r.status != 200:
            raise SystemExit("HTTP %d" % r.status)
    total = time.perf_counter() - begin
    conn.close()
    times.sort()
    return n / total, times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    from cddlm.application.users import UsersFile, hash_secret, verify_secret
    folder = tempfile.mkdtemp(prefix="cddlm-auth-bench-")
    os.chmod(folder, 0o711)
    users = UsersFile(os.path.join(folder, "users.json"))
    secret = users.add("bench", "bench-password", digest=True)
    bearer = users.new_token("bench")
    stored = hash_secret("bench-password")
    t = time.perf_counter()
    for _ in range(10):
        verify_secret("bench-password", stored)
    scrypt_ms = (time.perf_counter() - t) * 100
    local, local_port = start(os.path.join(folder, "local"), [])
    # not root: components would run as the portal's own account, which only --insecure allows
    run_as = ["--run-as", "nobody"] if os.geteuid() == 0 else ["--insecure"]
    secured, port = start(os.path.join(folder, "users"), ["--users", users.path] + run_as)
    basic = {"Authorization": "Basic " + base64.b64encode(b"bench:bench-password").decode()}
    forms = [
        ("local mode (no authentication)", local_port, lambda: (envelope(), {})),
        ("HTTP Basic", port, lambda: (envelope(), basic)),
        ("Bearer token", port, lambda: (envelope(), {"Authorization": "Bearer " + bearer})),
        ("UsernameToken PasswordText", port, lambda: (envelope(token("bench", "bench-password", False)), {})),
        ("UsernameToken PasswordDigest", port, lambda: (envelope(token("bench", secret, True)), {})),
    ]
    try:
        for _, p, make in forms:          # warm up (and fill the credential cache)
            measure(p, 50, make)
        print("%-32s %10s %9s %9s" % ("form", "req/s", "p50 ms", "p99 ms"))
        for name, p, make in forms:
            rate, p50, p99 = measure(p, args.requests, make)
            print("%-32s %10.0f %9.2f %9.2f" % (name, rate, p50, p99))
        print("one scrypt check (N=2^14, r=8, p=1): %.1f ms; paid once per credential per "
              "cache period, and by an attacker at most failures_per_minute times a minute "
              "per address" % scrypt_ms)
    finally:
        for proc in (local, secured):
            proc.terminate()
            proc.wait(20)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
