#!/bin/sh
# A small multi-host cluster on this machine: three host portals (`cddlm portal serve --agent`)
# on the loopback addresses 127.0.0.2-4, ports 18481-18483 ($HOST_PORT and the next two), each
# with its own state directory and a user "front", and a front portal on 127.0.0.1:8080
# ($FRONT_PORT) whose datacenter (datacenter.yaml, with those ports) names them as agents and
# which signs in to them with agents.toml. The front starts once every host portal is ready; a
# portal that cannot start stops the others. Ctrl-C stops the portals (their components keep
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
stop() { [ -z "$PIDS" ] || kill $PIDS 2>/dev/null || :; PIDS=""; wait; }   # (some may be gone)
trap 'stop; exit 0' INT TERM     # Ctrl-C: every portal stops, and that is no error
trap stop EXIT                   # an error here: the portals started so far stop too
# the front signs in as "front", a user there: its quotas must hold the largest share the front
# sends (one sub-application per front application, of up to all its components), so they are
# ten times the defaults (QUOTAS='--quota components=N ...' to choose others)
QUOTAS=${QUOTAS:---quota applications=1000 --quota components=10000 --quota descriptor_bytes=16777216}
HOST_PORT=${HOST_PORT:-18481}
SUBST=""
for i in 1 2 3; do
    dir="$STATE/h$i"; mkdir -p "$dir"; chmod 711 "$dir"
    port=$((HOST_PORT + i - 1))
    printf '%s\n' "$PASSWORD" | "$CDDLM" user add front --replace --users "$dir/users.json" >/dev/null
    rm -f "$dir/out.log"
    (umask 066; exec "$CDDLM" portal serve --agent --host "127.0.0.$((i + 1))" --port "$port" \
        --state-dir "$dir/state" --users "$dir/users.json" $QUOTAS $EXTRA) >"$dir/out.log" 2>&1 &
    PIDS="$PIDS $!"
    SUBST="$SUBST -e s|//127.0.0.$((i + 1)):1848$i/|//127.0.0.$((i + 1)):$port/|"
done
# every host portal ready (its "portal ready at" line) before the front starts; one that exits
# (its port taken ...) or is not ready within a minute says why, and the others stop
waited=0
for i in 1 2 3; do
    pid=$(echo $PIDS | cut -d' ' -f$i)
    until grep -q "^portal ready at " "$STATE/h$i/out.log" 2>/dev/null; do
        waited=$((waited + 1))
        if ! kill -0 "$pid" 2>/dev/null || [ $waited -gt 600 ]; then
            echo "host portal h$i did not start ($STATE/h$i/out.log):" >&2
            tail -n 3 "$STATE/h$i/out.log" >&2
            if grep -q "already in use" "$STATE/h$i/out.log"; then
                echo "(HOST_PORT=N puts the three host portals on ports N to N+2)" >&2
            fi
            exit 1
        fi
        sleep 0.1
    done
done
sed $SUBST "$HERE/datacenter.yaml" >"$STATE/datacenter.yaml"
printf '[default]\nuser = "front"\npassword = "%s"\n' "$PASSWORD" >"$STATE/agents.toml"
# the front in the foreground: when it stops (Ctrl-C, or it cannot start), the others stop too
"$CDDLM" portal serve --port "${FRONT_PORT:-8080}" --state-dir "$STATE/front" \
    --datacenter "$STATE/datacenter.yaml" --agent-credentials "$STATE/agents.toml"
