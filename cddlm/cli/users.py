"""``cddlm user`` and ``cddlm token``: the users file of a portal (``--users FILE``).

Passwords are read from stdin when it is not a terminal (the first line), else prompted for
twice; they never appear on the command line. Tokens and digest secrets are printed once and
kept only as hashes (tokens) or not at all (digest secrets): see ``application/users.py``.
A running portal sees the changes at once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import sys

from cddlm.application.users import ROLES, UsersFile
from cddlm.cli import output
from cddlm.errors import BadArgument


def read_password(name: str) -> str:
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        if not line:
            raise BadArgument("no password on stdin (give it as the first line)")
        return line.rstrip("\r\n")
    first = getpass.getpass("password for %s: " % name)
    if getpass.getpass("again: ") != first:
        raise BadArgument("the passwords differ")
    return first


def cmd_user(args: argparse.Namespace) -> int:
    users = UsersFile(args.users)
    if args.user_command == "ls":
        found = users.users()
        if not found:
            print("no users in %s" % users.path)
            return 0
        output.table(("NAME", "ROLE", "RUN AS", "TOKENS", "DIGEST"),
                     [(u.name, u.role, u.run_as or "-", len(u.tokens), "yes" if u.digest else "no")
                      for u in found.values()])
        return 0
    if args.user_command == "add":
        secret = users.add(args.name, read_password(args.name), args.role, args.run_as,
                           digest=args.digest, replace=args.replace)
        print("user %s %s (role %s)" % (args.name, "changed" if args.replace else "added", args.role))
        if secret:
            print_digest(args.name, secret)
        return 0
    if args.user_command == "digest":
        print_digest(args.name, users.new_digest(args.name))
        return 0
    users.remove(args.name)
    print("user %s removed" % args.name)
    return 0


def print_digest(name: str, secret: str) -> None:
    print("WS-Security PasswordDigest secret for %s (shown once; use it as the password of a "
          "digest UsernameToken):\n%s" % (name, secret))


def cmd_token(args: argparse.Namespace) -> int:
    users = UsersFile(args.users)
    if args.token_command == "create":
        token = users.new_token(args.name, args.label or "")
        print(token)
        print("(a bearer token for %s, shown once: send it as 'Authorization: Bearer TOKEN' or "
              "set CDDLM_TOKEN)" % args.name, file=sys.stderr)
        return 0
    if args.token_command == "ls":
        user = users.users().get(args.name)
        if user is None:
            raise BadArgument("no user %s in %s" % (args.name, users.path))
        if not user.tokens:
            print("%s has no tokens" % args.name)
            return 0
        output.table(("ID", "CREATED", "LABEL"), [
            (token_id, dt.datetime.fromtimestamp(created, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
             label) for token_id, _, created, label in sorted(user.tokens, key=lambda t: t[2])])
        return 0
    users.remove_token(args.name, args.id)
    print("token %s of %s revoked" % (args.id, args.name))
    return 0


def register(sub) -> None:
    def users_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--users", required=True, metavar="FILE",
                       help="the users file (made with mode 0600 if missing)")

    u = sub.add_parser("user", help="users of a portal (its --users file)").add_subparsers(
        dest="user_command", required=True, metavar="COMMAND")
    add = u.add_parser("add", help="add a user (the password from stdin, or prompted)")
    add.add_argument("name", metavar="NAME", help="the user's name")
    add.add_argument("--role", choices=ROLES, default="user",
                     help="user: own applications only; admin: every application, hosts, users")
    add.add_argument("--run-as", metavar="ACCOUNT",
                     help="the OS account this user's components run as (overrides --run-as)")
    add.add_argument("--digest", action="store_true",
                     help="also issue a WS-Security PasswordDigest secret (printed once)")
    add.add_argument("--replace", action="store_true", help="change an existing user")
    users_option(add)
    ls = u.add_parser("ls", help="list users: role, account, tokens")
    users_option(ls)
    rm = u.add_parser("rm", help="remove a user (their applications stay, reachable by admins)")
    rm.add_argument("name", metavar="NAME", help="the user's name")
    users_option(rm)
    dg = u.add_parser("digest", help="issue a new PasswordDigest secret (the old one stops working)")
    dg.add_argument("name", metavar="NAME", help="the user's name")
    users_option(dg)
    for p in (add, ls, rm, dg):
        p.set_defaults(func=cmd_user)

    t = sub.add_parser("token", help="bearer tokens of a user").add_subparsers(
        dest="token_command", required=True, metavar="COMMAND")
    create = t.add_parser("create", help="a new bearer token (printed once)")
    create.add_argument("name", metavar="NAME", help="the user the token is for")
    create.add_argument("--label", help="what the token is for (shown by token ls)")
    users_option(create)
    tls = t.add_parser("ls", help="a user's tokens: id, created, label")
    tls.add_argument("name", metavar="NAME", help="the user whose tokens to list")
    users_option(tls)
    trm = t.add_parser("rm", help="revoke a token")
    trm.add_argument("name", metavar="NAME", help="the user's name")
    trm.add_argument("id", metavar="ID", help="the token's id (token ls)")
    users_option(trm)
    for p in (create, tls, trm):
        p.set_defaults(func=cmd_token)
