"""The users file: the principals of a portal, their roles, their password and token hashes,
and the OS accounts their components run as. Managed with ``cddlm user`` and ``cddlm token``,
read by ``cddlm portal serve --users FILE`` (and read again whenever it changes).

JSON, mode 0600, written atomically (a temporary file renamed over it) under a lock file::

    {"version": 1,
     "digest_key": "<32 random bytes, base64>",
     "users": {"alice": {"role": "user", "password": "scrypt$16384$8$1$<salt>$<hash>",
                         "run_as": "cddlm-alice", "digest": "<id>",
                         "tokens": {"<id>": {"hash": "scrypt$...", "created": 1.7e9,
                                             "label": "ci"}}}}}

Passwords are kept only as salted scrypt hashes (``hashlib.scrypt``, N=2^14, r=8, p=1: about
16 MiB and some tens of milliseconds per check), so that a stolen file does not give them away.
Bearer tokens are 256 random bits: no guessing or dictionary can find one, so a token is kept
as its SHA-256 (``sha256$...``), which is checked in a microsecond; a portal under a flood of
password guesses still checks every token at once (tokens made before kept as scrypt hashes
still work, at scrypt's price). A WS-Security
PasswordDigest cannot be checked against a one-way hash (it is SHA-1 over the nonce, the time
and the secret itself), so a user who needs it gets a *digest secret* of their own: it is
derived from the file's ``digest_key`` and the user's ``digest`` id (HMAC-SHA256), printed once
by ``cddlm user add --digest`` (or ``cddlm user digest``) and never stored; issuing a new one
revokes the old.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from cddlm.errors import BadArgument

log = logging.getLogger(__name__)

ROLES = ("user", "admin")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
ACCOUNT = re.compile(r"^[a-z_][a-z0-9_.{}-]{0,63}$")
MIN_PASSWORD = 8
SCRYPT = (1 << 14, 8, 1)          # N, r, p
TOKEN_PREFIX = "cddlm"


# -- hashes ------------------------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_secret(secret: str) -> str:
    n, r, p = SCRYPT
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(secret.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=32)
    return "scrypt$%d$%d$%d$%s$%s" % (n, r, p, _b64(salt), _b64(key))


_DUMMY = None


def verify_secret(secret: str, stored: str | None) -> bool:
    """Whether ``secret`` matches the stored hash; without one, the same work is done anyway
    (an unknown user takes as long to refuse as a wrong password)."""
    global _DUMMY
    if not stored:
        _DUMMY = _DUMMY or hash_secret("no such user")
        stored, secret = _DUMMY, secret + "\0"
    try:
        kind, n, r, p, salt, key = stored.split("$")
        if kind != "scrypt":
            return False
        found = hashlib.scrypt(secret.encode("utf-8"), salt=_unb64(salt), n=int(n), r=int(r),
                               p=int(p), dklen=len(_unb64(key)), maxmem=128 * 1024 * 1024)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, _unb64(key))


def hash_token(secret: str) -> str:
    """The stored form of a bearer token's secret (see the module docstring)."""
    return "sha256$" + _b64(hashlib.sha256(secret.encode("utf-8")).digest())


def verify_token(secret: str, stored: str) -> bool:
    """Whether ``secret`` is the token stored as ``stored`` (either form)."""
    if stored.startswith("sha256$"):
        return hmac.compare_digest(hash_token(secret), stored)
    return verify_secret(secret, stored)


def digest_secret(key: str, name: str, digest_id: str) -> str:
    """The PasswordDigest secret of a user (see the module docstring)."""
    mac = hmac.new(_unb64(key), b"cddlm-digest\0%s\0%s" % (name.encode(), digest_id.encode()),
                   hashlib.sha256)
    return _b64(mac.digest())


def split_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a bearer token ``cddlm_<id>_<secret>``, None when it is not one."""
    parts = (token or "").strip().split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not re.fullmatch(r"[0-9a-f]{16}", parts[1]):
        return None
    return parts[1], parts[2]


# -- the file ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class User:
    name: str
    role: str = "user"
    password: str | None = None       # scrypt hash
    run_as: str | None = None         # OS account for the user's components
    digest: str | None = None         # id of the current PasswordDigest secret
    tokens: tuple[tuple[str, str, float, str], ...] = ()   # (id, hash, created, label)

    @property
    def admin(self) -> bool:
        return self.role == "admin"


def _parse(data: Any, path: str) -> tuple[dict[str, User], str]:
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("users"), dict):
        raise BadArgument("%s is not a cddlm users file (version 1)" % path)
    users = {}
    for name, entry in data["users"].items():
        if not NAME.match(str(name)) or not isinstance(entry, dict) or entry.get("role") not in ROLES:
            raise BadArgument("%s: the entry of user %r is not valid" % (path, name))
        tokens = entry.get("tokens") or {}
        users[name] = User(name, entry["role"], entry.get("password"), entry.get("run_as"),
                           entry.get("digest"),
                           tuple((tid, t.get("hash"), float(t.get("created") or 0), t.get("label") or "")
                                 for tid, t in sorted(tokens.items())))
    return users, str(data.get("digest_key") or "")


class UsersFile:
    """Reading and changing one users file (the ``cddlm user`` and ``cddlm token`` commands)."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    def read(self) -> dict:
        try:
            with open(self.path, "rb") as f:
                raw = f.read(16 * 1024 * 1024)
        except FileNotFoundError:
            return {"version": 1, "digest_key": _b64(secrets.token_bytes(32)), "users": {}}
        except OSError as e:
            raise BadArgument("cannot read the users file %s: %s" % (self.path, e.strerror)) from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise BadArgument("the users file %s is not valid JSON: %s" % (self.path, e)) from None
        _parse(data, self.path)
        return data

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict]:
        """The file's data under its lock; written back (atomically, mode 0600) on success."""
        folder = os.path.dirname(self.path)
        os.makedirs(folder, exist_ok=True)
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self.read()
            yield data
            _parse(data, self.path)
            tmp = tempfile.NamedTemporaryFile("w", dir=folder, prefix=".users-", delete=False,
                                              encoding="utf-8")
            try:
                os.fchmod(tmp.fileno(), 0o600)
                json.dump(data, tmp, indent=2, sort_keys=True)
                tmp.write("\n")
                tmp.flush()
                os.fsync(tmp.fileno())
                tmp.close()
                os.replace(tmp.name, self.path)
            except BaseException:
                tmp.close()
                with contextlib.suppress(OSError):
                    os.unlink(tmp.name)
                raise
        finally:
            os.close(fd)

    def users(self) -> dict[str, User]:
        return _parse(self.read(), self.path)[0]

    # -- changes -------------------------------------------------------------------------------
    def add(self, name: str, password: str, role: str = "user", run_as: str | None = None,
            digest: bool = False, replace: bool = False) -> str | None:
        """Add (or with ``replace`` change) a user; returns the new digest secret when asked."""
        check_name(name)
        if role not in ROLES:
            raise BadArgument("role must be one of %s" % ", ".join(ROLES))
        if len(password) < MIN_PASSWORD:
            raise BadArgument("the password must have at least %d characters" % MIN_PASSWORD)
        if run_as is not None and not ACCOUNT.match(run_as):
            raise BadArgument("%r is not an account name" % run_as)
        with self.edit() as data:
            old = data["users"].get(name)
            if old is not None and not replace:
                raise BadArgument("user %s exists already (--replace changes it)" % name)
            entry = dict(old or {}, role=role, password=hash_secret(password))
            if run_as is not None:
                entry["run_as"] = run_as
            entry.setdefault("tokens", {})
            if digest:
                entry["digest"] = secrets.token_hex(8)
            data["users"][name] = entry
            return digest_secret(data["digest_key"], name, entry["digest"]) if digest else None

    def remove(self, name: str) -> None:
        with self.edit() as data:
            if data["users"].pop(name, None) is None:
                raise BadArgument("no user %s in %s" % (name, self.path))

    def new_digest(self, name: str) -> str:
        with self.edit() as data:
            entry = self._entry(data, name)
            entry["digest"] = secrets.token_hex(8)
            return digest_secret(data["digest_key"], name, entry["digest"])

    def new_token(self, name: str, label: str = "") -> str:
        """A new bearer token for ``name``: returned once, kept only as a hash."""
        with self.edit() as data:
            entry = self._entry(data, name)
            token_id, secret = secrets.token_hex(8), _b64(secrets.token_bytes(32))
            entry.setdefault("tokens", {})[token_id] = {"hash": hash_token(secret),
                                                        "created": time.time(), "label": label}
            return "%s_%s_%s" % (TOKEN_PREFIX, token_id, secret)

    def remove_token(self, name: str, token_id: str) -> None:
        with self.edit() as data:
            if self._entry(data, name).get("tokens", {}).pop(token_id, None) is None:
                raise BadArgument("user %s has no token %s" % (name, token_id))

    def _entry(self, data: dict, name: str) -> dict:
        entry = data["users"].get(name)
        if entry is None:
            raise BadArgument("no user %s in %s" % (name, self.path))
        return entry


def check_name(name: str) -> None:
    if not NAME.match(name or ""):
        raise BadArgument("%r is not a user name (letters, digits, _ . @ -; at most 64)" % name)


# -- the portal's view of the file --------------------------------------------------------------
class Directory:
    """The users file as a running portal sees it: read again when it changes (a bad edit keeps
    the last good version and is logged), with verified credentials remembered for
    ``cache_seconds`` so that a client's every request does not pay for scrypt."""

    def __init__(self, path: str, cache_seconds: float = 60.0):
        self.file = UsersFile(path)
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._users: dict[str, User] = {}
        self._key = ""
        self._tokens: dict[str, tuple[str, str]] = {}     # token id -> (user, hash)
        self._cache: dict[bytes, tuple[float, str]] = {}  # hmac(credential) -> (until, user)
        self._pepper = secrets.token_bytes(32)             # keys the cache, this process only
        self.load(strict=True)

    def load(self, strict: bool = False) -> None:
        try:
            st = os.stat(self.file.path)
        except OSError as e:
            if strict:
                raise BadArgument("cannot read the users file %s: %s (create it with: cddlm user "
                                  "add NAME --users %s)" % (self.file.path, e.strerror,
                                                            self.file.path)) from None
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp == self._stamp:
                return
            try:
                users, key = _parse(self.file.read(), self.file.path)
            except BadArgument as e:
                if strict:
                    raise
                log.error("the users file changed but cannot be used (%s); the previous version "
                          "stays in force", e)
                self._stamp = stamp
                return
            if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                log.warning("the users file %s may be read by others (mode %o): chmod 600 it",
                            self.file.path, stat.S_IMODE(st.st_mode))
            self._users, self._key, self._stamp = users, key, stamp
            self._tokens = {tid: (u.name, h) for u in users.values() for tid, h, _, _ in u.tokens}
            self._cache = {}

    def user(self, name: str) -> User | None:
        self.load()
        return self._users.get(name)

    def names(self) -> list[str]:
        self.load()
        return sorted(self._users)

    def _cached(self, kind: bytes, credential: str) -> tuple[bytes, str | None]:
        key = hmac.new(self._pepper, kind + b"\0" + credential.encode("utf-8", "surrogatepass"),
                       hashlib.sha256).digest()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return key, hit[1]
        return key, None

    def _remember(self, key: bytes, name: str) -> None:
        if len(self._cache) > 10_000:
            self._cache = {}
        self._cache[key] = (time.monotonic() + self.cache_seconds, name)

    def _password_key(self, name: str, password: str) -> tuple[bytes, User | None]:
        key, hit = self._cached(b"password\0" + name.encode("utf-8", "surrogatepass"), password)
        user = self._users.get(name)
        return key, user if hit == name and user is not None else None

    def cached_password(self, name: str, password: str) -> User | None:
        """The user, when ``password`` was verified as theirs lately (no scrypt: a dictionary
        look-up); None says nothing."""
        self.load()
        return self._password_key(name, password)[1]

    def check_password(self, name: str, password: str) -> User | None:
        """The user, when ``password`` is theirs (scrypt, unless it was verified lately)."""
        self.load()
        key, user = self._password_key(name, password)
        if user is not None:
            return user
        user = self._users.get(name)
        if not verify_secret(password, user.password if user else None) or user is None:
            return None
        self._remember(key, name)
        return user

    def _token(self, token: str) -> tuple[bytes, User | None, tuple[str, str] | None, str | None]:
        """(cache key, the cached user, (id, secret), (owner, stored hash))."""
        key, hit = self._cached(b"token", token)
        parts = split_token(token)
        return (key, self._users.get(hit) if hit is not None else None, parts,
                self._tokens.get(parts[0]) if parts else None)

    def token_costly(self, token: str) -> bool:
        """Whether checking ``token`` needs scrypt (a token stored before tokens were kept as
        SHA-256, not verified lately)."""
        self.load()
        _, user, _, owner = self._token(token)
        return user is None and owner is not None and not owner[1].startswith("sha256$")

    def check_token(self, token: str) -> User | None:
        """The user a bearer token belongs to. A token id that names no token is refused
        without hashing anything: ids are not secret, the 256 bits after them are."""
        self.load()
        key, user, parts, owner = self._token(token)
        if user is not None:
            return user
        if parts is None or owner is None or not owner[1] or not verify_token(parts[1], owner[1]):
            return None
        self._remember(key, owner[0])
        return self._users.get(owner[0])

    def digest_secret(self, name: str) -> str | None:
        """The PasswordDigest secret of ``name`` (None: the user has none)."""
        self.load()
        user = self._users.get(name)
        if user is None or not user.digest or not self._key:
            return None
        return digest_secret(self._key, name, user.digest)

    def account(self, name: str) -> str | None:
        user = self.user(name)
        return user.run_as if user else None
