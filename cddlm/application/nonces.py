"""The nonces a users file's portals have accepted: a small SQLite file beside the users file
(``users.json.nonces``, mode 0600), so that a UsernameToken accepted by one portal is refused
by every other portal reading the same users file, whether or not they share a store.

Why beside the users file: a PasswordDigest proves only that its sender knew the user's digest
secret when it made the token; the digest covers the nonce and the time, nothing that names
the portal (the OASIS profile fixes the formula), so a token taken off the wire is as good on
any portal that knows the secret until its window ends. Portals that know the same secret are
exactly those that read the same users file, and a file's neighbours are what they all reach.
The store's own nonce table (``repository.remember_nonce``) still serves portals that share a
store but each read a copy of the users file. Portals given *copies* of one users file on
machines that share neither the file's folder nor a store do not see each other's nonces:
give each its own digest secrets (``cddlm user digest``) or let them share the store (README,
"On the wire").

A nonce is kept by its SHA-256 (with the user's name) until the token could no longer be
accepted anyway; ``forget`` drops the older ones (a scheduled job).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading

log = logging.getLogger(__name__)


class NonceRecord:
    """``remember(digest, expires)``: whether the nonce is new to every portal of the file."""

    def __init__(self, users_file: str):
        self.path = os.path.abspath(users_file) + ".nonces"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # a lost commit (a crash of this machine) could let one replay through in its window;
        # not syncing each accepted token keeps digest logins as cheap as the store's record
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS nonces (digest TEXT PRIMARY KEY, "
                           "expires REAL NOT NULL)")

    def remember(self, digest: str, expires: float) -> bool:
        with self._lock:
            cur = self._conn.execute("INSERT OR IGNORE INTO nonces (digest, expires) VALUES (?, ?)",
                                     (digest, expires))
            return cur.rowcount == 1

    def forget(self, now: float) -> int:
        with self._lock:
            return self._conn.execute("DELETE FROM nonces WHERE expires < ?", (now,)).rowcount

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.close()


def open_record(users_file: str) -> NonceRecord | None:
    """The record of ``users_file``'s portals, or None (logged) when its folder is read-only:
    then only the store's record refuses replays (portals sharing the users file but not the
    store would accept each other's)."""
    try:
        return NonceRecord(users_file)
    except (OSError, sqlite3.Error) as e:
        log.warning("cannot keep the nonce record beside the users file (%s): a UsernameToken "
                    "accepted here may be accepted once more by a portal that reads the same users "
                    "file but not this store", e)
        return None
