"""What Linux's /proc says on a machine whose /proc the portal cannot read: asked there in POSIX
``sh`` and ``awk`` (nothing of ours installed), and the answers parsed here. Pure.

Two runners use it: the SSH runner (its scripts' prelude, ``sshscript``) and the Slurm runner
(a job script's watcher, ``REPORTER``). ``procfs`` is the same knowledge for this machine.

- ``st PID``: whether the process lives (not a zombie); sets ``S`` (its start time, field 22
  of /proc/PID/stat: with the pid, an identity), ``G`` (its process group) and ``I`` (its
  session).
- ``hs PID``: whether it holds a socket (the shell's own test: no program run).
- ``tp PID``: the TCP ports it listens on, in hexadecimal as /proc/net/tcp writes them, each
  followed by a space: its socket inodes (``ls -l /proc/PID/fd``) matched against the
  namespace's sockets in state ``0A`` (LISTEN); nothing, and no program run, for a process
  holding no socket. A socket's link is ``N -> socket:[INODE]``, the one arrow and nothing
  after: a file the process opened whose name holds `` -> socket:[INODE]`` (of another
  process's socket) is not taken for one.
- ``rp FILE JOB``: the Slurm watcher. Called by a job script just before it ``exec``s its
  program: writes ``JOB PID`` into FILE (the job's launch marker, ``slurm._marker``) at once,
  then starts a detached watcher (its output to /dev/null, never the component's logs; not a
  child of the program, which never sees it) that, while ``$$`` (after the ``exec``: the
  program) lives with the same start time, replaces FILE atomically (a temporary file renamed
  over it) with ``JOB PID PORT...`` whenever that changes. It sets no variable of the script
  (the program's environment stays the component's). It looks right away, then after each
  pause of ``REPORT_PACE`` in turn, the last one over and over (a change starts the pace
  again), and exits when the program is gone; Slurm also kills it with the job (the job ends
  when its batch script's process, the program, exits: the watcher keeps nothing alive).
"""

from __future__ import annotations

import re

REPORT_PACE = ("0.5", "1", "2", "4", "8")     # seconds between a watcher's looks

ALIVE = r"""
st() { s=; read -r s 2>/dev/null < "/proc/$1/stat"; s=${s##*) }; set -- $s
  case $1 in Z|X|x|'') return 1;; esac; S=${20} G=$3 I=$4; }
"""

LISTENING = r"""
hs() { for f in "/proc/$1/fd/"*; do [ -S "$f" ] && return 0; done; return 1; }
tp() { hs "$1" && ls -l "/proc/$1/fd" 2>/dev/null | awk '
    FILENAME ~ /^\/proc\/net\/tcp6?$/ { if ($4 == "0A" && ($10 in w)) printf "%s ", substr($2, index($2, ":") + 1); next }
    { for (i = 1; i < NF && $i != "->"; i++) ;
      if (i == NF - 1 && $NF ~ /^socket:\[[0-9]+\]$/) w[substr($NF, 9, length($NF) - 9)] = 1 }
  ' - /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
"""

_PACE = " ".join("%s) d=%s;;" % pair for pair in zip(REPORT_PACE, REPORT_PACE[1:]))
REPORTER = ALIVE + LISTENING + r"""
rp() { printf '%s %s\n' "$2" "$$" > "$1" || return 0
  ( ( p=$$; st "$p" || exit 0; t=$S o="$2 $p" d=FIRST
      while :; do n="$2 $p"; hs "$p" && n="$n $(tp "$p")"; n=${n% }
        if [ "$n" != "$o" ] && st "$p" && [ "$S" = "$t" ]; then
          if printf '%s\n' "$n" > "$1.$p" && mv -f "$1.$p" "$1"; then o=$n d=FIRST; else rm -f "$1.$p"; fi
        fi
        sleep "$d"; st "$p" && [ "$S" = "$t" ] || exit 0
        case $d in PACE esac
      done ) </dev/null >/dev/null 2>&1 & ); }
""".replace("FIRST", REPORT_PACE[0]).replace("PACE", _PACE)

MAX_REPORT = 64 * 1024      # bytes of a watcher's file read (a longer one is refused)
MAX_PID = 4194304           # Linux's PID_MAX_LIMIT
_REPORT = re.compile(rb"([0-9]{1,10}) ([0-9]{1,7})((?: [0-9A-F]{4})*)\n?")


def hex_ports(words: list[str]) -> list[int]:
    """The ports of a ``tp`` answer (hexadecimal, as /proc/net/tcp writes them), each once,
    sorted; words that are not a port are left out."""
    out = set()
    for w in words:
        try:
            port = int(w, 16)
        except ValueError:
            continue
        if 0 < port < 65536:
            out.add(port)
    return sorted(out)


def report(data: bytes, job: int) -> tuple[int, list[int]] | None:
    """The pid and listening ports in a watcher's file (``rp``) of job ``job``; None for
    anything else: empty (being written), another job's, out of range, or junk. The file is
    on a folder the nodes write (and the program, running as the portal's account, could
    write it too): every byte is checked."""
    if len(data) > MAX_REPORT:
        return None
    found = _REPORT.fullmatch(data)
    if found is None or int(found.group(1)) != job:
        return None
    pid = int(found.group(2))
    if not 0 < pid <= MAX_PID:
        return None
    return pid, hex_ports(found.group(3).decode("ascii").split())
