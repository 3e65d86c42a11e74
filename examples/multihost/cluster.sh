#!/bin/sh
# A small multi-host cluster on this machine: three host portals (`cddlm portal serve --agent`)
# on the loopback addresses 127.0.0.2-4, each with its own state directory and a user "front",
# and a front portal on 127.0.0.1:8080 ($FRONT_PORT) whose datacenter (datacenter.yaml) names them as agents
# and which signs in to them with agents.toml. Ctrl-C stops the portals (their components keep
# running, as a portal's always do; `cddlm terminate` them first).
#
#   examples/multihost/cluster.sh            # or: make cluster
#   cddlm deploy examples/multihost/spread.xml && cddlm status spread
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CDDLM=${CDDLM:-$ROOT/.venv/bin/cddlm}
STATE=${STATE:-${TMPDIR:-/tmp}/cddlm-cluster}
PASSWORD=${PASSWORD:-front-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')}
mkdir -p "$STATE"
umask 077
# the host portals' components must not run as the portal's own account (they could rewrite its
# users file): as root they run as nobody, who must pass through the folders the portals make
# (umask 066: folders 0711, files 0600); as another user they cannot, which only --insecure
# allows: a demonstration on loopback only
if [ "$(id -u)" = 0 ]; then EXTRA="--run-as nobody"; chmod 711 "$STATE"; else EXTRA="--insecure"; fi
PIDS=""
stop() { [ -n "$PIDS" ] && kill $PIDS 2>/dev/null; wait; }
trap stop INT TERM EXIT
# the front signs in as "front", a user there: its quotas must hold the largest share the front
# sends (one sub-application per front application, of up to all its components), so they are
# ten times the defaults (QUOTAS='--quota components=N ...' to choose others)
QUOTAS=${QUOTAS:---quota applications=1000 --quota components=10000 --quota descriptor_bytes=16777216}
for i in 1 2 3; do
    dir="$STATE/h$i"; mkdir -p "$dir"; chmod 711 "$dir"
    printf '%s\n' "$PASSWORD" | "$CDDLM" user add front --replace --users "$dir/users.json" >/dev/null
    (umask 066; exec "$CDDLM" portal serve --agent --host "127.0.0.$((i + 1))" --port "1848$i" \
        --state-dir "$dir/state" --users "$dir/users.json" $QUOTAS $EXTRA) >"$dir/out.log" 2>&1 &
    PIDS="$PIDS $!"
done
printf '[default]\nuser = "front"\npassword = "%s"\n' "$PASSWORD" >"$STATE/agents.toml"
"$CDDLM" portal serve --port "${FRONT_PORT:-8080}" --state-dir "$STATE/front" \
    --datacenter "$HERE/datacenter.yaml" --agent-credentials "$STATE/agents.toml" &
PIDS="$PIDS $!"
wait
