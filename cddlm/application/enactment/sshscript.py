"""The SSH runner's remote side: POSIX ``sh`` scripts it sends, and the lines they answer. Pure.

An SSH host needs sshd, a POSIX ``sh``, Linux's ``/proc`` and ``setsid`` (util-linux or
busybox); nothing of ours is installed there. Each script is a ``PRELUDE`` of small functions
and one line per component, and answers one line per component, ``KEY WORD ...`` (KEY: the
component's index in the batch), so a batch of hundreds is one command.

A process is started as the local runner starts one, in its own session, with stdout and
stderr appended to files in its directory, identified by (pid, start time: field 22 of
/proc/PID/stat) and its pid file written before the program runs, so a start repeated after a
portal crash finds it (``ad``: the pid file names a live process whose environment carries its
``CDDLM_COMPONENT``) instead of starting a second one. One difference: the program runs below a
small ``sh`` (the session leader, its process group's id) that writes the exit status to
``status`` when it ends, because over SSH no portal is its parent to learn it. That shell traps
the stop signals (so they reach the program with their default action, and it outlives it);
a status above 128 is reported as the signal 128 less (as ``sh`` itself reports it).

The pid and status files are in the component's directory, where its program may write
anything: a pid is taken only as a process id (``pf``: the file read in one piece, since ``sh``'s
``read`` reads a byte at a time and a file rewritten meanwhile gave it the start of a longer
number) of a process of the component
(``mine``: at its start too, not only at re-adoption): one whose environment names it, or
whose session's leader's does (the wrapper's ``sh``, which no program of the component
replaces: a program started with an environment of its own, ``env -i``, is still its; one
that ends between being seen alive and its environment being read, started and ended, as its
status then says). A status is taken only as ``sh``'s 0-255 (``ended``). So a program cannot have another process
signalled (init's group is every process of the account), nor a worker fail on what it wrote.
"""

from __future__ import annotations

import shlex
import signal
from typing import Iterable

from cddlm.application.enactment import procsh

CHUNK = 64 * 1024       # bytes of a log read in one look
# the start time of a process that had ended when its start was checked (``wt``: "run PID -"):
# no process has it (start times are digits), so whatever process has that pid later (reused,
# or a pid the program wrote that was nobody's then) is never taken for it, nor signalled
ENDED_AT_START = "ended"

PRELUDE = procsh.ALIVE + procsh.LISTENING + r"""
is() { st "$1" && { [ "$2" = - ] || [ "$S" = "$2" ]; }; }
ours() { tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | grep -qxF "CDDLM_COMPONENT=$2"; }
mine() { ours "$1" "$2" || { st "$1" && [ "$I" != "$1" ] && ours "$I" "$2"; }; }
W='trap : HUP INT QUIT TERM USR1 USR2 ALRM; sh -c '\''echo $$ > "$0/pid" && exec "$@"'\'' "$0" "$@"; echo $? > "$0/status"'
pf() { p=$(head -c 16 "$1/pid" 2>/dev/null); case $p in ''|*[!0-9]*|????????*) return 1;; esac; }
ad() { [ -s "$2/pid" ] || return 1; pf "$2" || return 1; st "$p" || return 1
  mine "$p" "$3" || return 1; echo "$1 run $p $S"; }
sp() { k=$1 d=$2 c=$3; shift 3; { : > "$d/pid" && : > "$d/status"; } 2>/dev/null || { echo "$k fail cannot write in $d"; return; }
  cd "$c" 2>/dev/null || { echo "$k fail cannot enter its directory $c"; return; }
  setsid -f sh -c "$W" "$d" "$@" </dev/null >>"$d/stdout.log" 2>>"$d/stderr.log" \
    || echo "$k fail setsid could not start it"; }
wt() { n=0; while [ ! -s "$2/pid" ]; do n=$((n+1)); [ $n -gt 500 ] && { echo "$1 fail no pid file after 5 s"; return; }
  sleep 0.01; done; pf "$2" || { echo "$1 fail its pid file holds no process id"; return; }
  if st "$p" && mine "$p" "$3"; then echo "$1 run $p $S"; elif ! st "$p"; then echo "$1 run $p -"
  else echo "$1 fail its pid file names process $p, which is not its own"; fi; }
lv() { if is "$2" "$3"; then echo "$1 up $S"; return; fi
  [ -s "$4/status" ] || sleep 0.05; r=-; [ -s "$4/status" ] && read r < "$4/status"; echo "$1 end ${r:--}"; }
sg() { if is "$2" "$3"; then kill -$4 -$G 2>/dev/null || kill -$4 $2 2>/dev/null; echo "$1 sent $G $2"
  else echo "$1 gone"; fi; }
so() { p=$2 t=$3; if [ "$p" = - ] && [ -s "$5/pid" ]; then t=-; { pf "$5" && mine "$p" "$6"; } || p=-; fi
  if [ "$p" = - ]; then echo "$1 gone"; else sg "$1" "$p" "$t" "$4"; fi; }
kg() { kill -KILL -$2 2>/dev/null; echo "$1 killed"; }
lg() { f=$3; if [ ! -f "$f" ] || [ -h "$f" ]; then echo "$1 log $2 0 0"; echo; return; fi
  z=$(wc -c < "$f"); z=$((z)); o=$4
  if [ "$o" = - ]; then o=$((z > $5 ? z - $5 : 0)); elif [ "$o" -gt "$z" ]; then o=0; fi
  n=$((z - o)); [ $n -gt $5 ] && n=$5; echo "$1 log $2 $o $n"
  [ $n -gt 0 ] && tail -c +$((o + 1)) "$f" | head -c $n; echo; }
cap() { find "$1" -type f -name '*.log' -size +"$2"c -exec sh -c \
    'for f; do tail -c "$0" "$f" > "$f.1" && : > "$f"; done' "$2" {} + 2>/dev/null; }
dk() { if [ -d "$2" ]; then echo "$1 ok"; else echo "$1 fail cannot create $2"; fi; }
ex() { case $2 in
    /*) if [ -f "$2" ] && [ -x "$2" ]; then echo "$1 ok $2"; else echo "$1 missing"; fi;;
    *) x=$(command -v "$2" 2>/dev/null); if [ -n "$x" ]; then echo "$1 ok $x"; else echo "$1 missing"; fi;;
  esac; }
fw() { mkdir -p "${2%/*}" 2>/dev/null && rm -f "$2" && printf '%s' "$4" > "$2.$$" && chmod "$3" "$2.$$" \
    && mv -f "$2.$$" "$2" && echo "$1 ok" || { rm -f "$2.$$"; echo "$1 fail cannot write $2"; }; }
fx() { if [ -f "$2" ]; then echo "$1 ok"; else echo "$1 missing"; fi; }
pt() { echo "$1 ports $(tp "$2")"; }
"""


def q(value: object) -> str:
    return shlex.quote(str(value))


def script(lines: Iterable[str]) -> str:
    return PRELUDE + "\n".join(lines) + "\n"


def env_exports(env: dict[str, str]) -> str:
    """``export K=V ...`` for a subshell (names that are not shell names are refused)."""
    for name in env:
        if not name or not (name[0].isalpha() or name[0] == "_") \
                or not all(c.isalnum() or c == "_" for c in name):
            raise ValueError("environment variable name %r cannot be set over SSH" % name)
    return "export " + " ".join("%s=%s" % (k, q(v)) for k, v in env.items()) if env else ":"


def start_line(key: int, workdir: str, cwd: str, component: str, env: dict[str, str],
               argv: list[str]) -> tuple[str, str]:
    """The adopt-or-spawn line of one process, and its collect line (after all spawns)."""
    spawn = "ad %d %s %s || { ( %s; sp %d %s %s %s ); P=\"$P %d\"; }" % (
        key, q(workdir), q(component), env_exports(env), key, q(workdir), q(cwd),
        " ".join(q(a) for a in argv), key)
    collect = 'case " $P " in *" %d "*) wt %d %s %s;; esac' % (key, key, q(workdir), q(component))
    return spawn, collect


def pid_of(word: str) -> int | None:
    """A process id a script answered (from a pid file the program may write): None for a
    word that is none."""
    ok = word.isascii() and word.isdigit() and len(word) <= 7 and 0 < int(word) <= procsh.MAX_PID
    return int(word) if ok else None


def parse_lines(text: bytes) -> dict[int, list[str]]:
    """``KEY WORD ...`` lines by key (the last line of a key wins; other lines are ignored)."""
    out: dict[int, list[str]] = {}
    for line in text.decode("utf-8", "replace").splitlines():
        head, _, rest = line.partition(" ")
        if head.isdigit():
            out[int(head)] = rest.split(" ")
    return out


def parse_logs(text: bytes) -> tuple[dict[tuple[int, str], tuple[int, bytes]], dict[int, list[str]]]:
    """The answers of a script with ``lg`` lines: {(key, stream): (start offset, bytes)} and
    the other lines by key. A read cut short (the file truncated meanwhile) ends the parse."""
    logs: dict[tuple[int, str], tuple[int, bytes]] = {}
    lines: dict[int, list[str]] = {}
    at = 0
    while at < len(text):
        end = text.find(b"\n", at)
        if end < 0:
            break
        words = text[at:end].decode("utf-8", "replace").split(" ")
        at = end + 1
        if len(words) == 5 and words[0].isdigit() and words[1] == "log":
            try:
                start, n = int(words[3]), int(words[4])
            except ValueError:
                break
            data = text[at:at + n]
            if len(data) < n or text[at + n:at + n + 1] != b"\n":
                break
            logs[(int(words[0]), words[2])] = (start, data)
            at += n + 1
        elif words[0].isdigit():
            lines[int(words[0])] = words[1:]
    return logs, lines


def ended(status: str) -> tuple[str, int | None, str | None]:
    """What a recorded status says: (words, exit code, signal name). The status file is in the
    component's directory, where its program may write anything: only ``sh``'s 0-255 is one."""
    if not (status.isascii() and status.isdigit() and len(status) <= 3 and int(status) <= 255):
        return "ended (its exit status was not recorded: killed with its session?)", None, None
    code = int(status)
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
            return "killed by signal %s" % name, None, name
        except ValueError:
            pass
    return "exited with status %d" % code, code, None


def ports(words: list[str]) -> list[int]:
    """The ports of a ``pt`` answer (``procsh.tp``'s)."""
    return procsh.hex_ports(words[1:]) if words and words[0] == "ports" else []
