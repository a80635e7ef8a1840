#!/usr/bin/python3
"""End-to-end checks of cuckoo_client's token and TLS options against a real cuckood.

Run by tests/e2e/security_e2e_test.cc, which starts the server with
--tls-cert/--tls-key and an --auth-tokens file holding the three tokens:

    PYTHONPATH=build/release/python /usr/bin/python3 tests/e2e/python_security_check.py \\
        --target 127.0.0.1:50051 --ca ca.pem \\
        --admin-token ck_... --write-token ck_... --read-token ck_...

The tokens' grants: admin:*, write:* and read:*. Prints "ok <check>" or
"FAIL <check>" and a traceback per check, then "<n> checks passed" (exit 0)
or "<k> of <n> checks FAILED" (exit 1).
"""

import argparse
import sys
import uuid

import grpc

import cuckoo_client
from cuckoo_client import CuckooError, InsertResult

from check_runner import run_checks  # tests/e2e/check_runner.py, beside this file


def expect_error(code, fn, *args, **kwargs):
    """Calls fn(*args, **kwargs), which must raise CuckooError with `code`; returns it."""
    try:
        fn(*args, **kwargs)
    except CuckooError as e:
        assert e.code == code, f"expected {code}, got {e!r}"
        return e
    raise AssertionError(f"expected CuckooError {code.name}, got no error")


class Checks:
    """The checks; each method named check_* is one."""

    def __init__(self, args):
        self.args = args
        # One filter for all checks, made by the admin client.
        self.filter = f"py-sec-{uuid.uuid4().hex[:8]}"

    def client(self, token, **kwargs):
        kwargs.setdefault("ca", self.args.ca)
        return cuckoo_client.Client(self.args.target, token=token, timeout=10,
                                     retry_timeout=0, **kwargs)

    def check_create_insert_lookup(self):
        with self.client(self.args.admin_token) as admin:
            info = admin.create_filter(self.filter, capacity=1000, fingerprint_bits=32, seed=7)
            assert info.name == self.filter, info
        # The CA as bytes this time.
        with open(self.args.ca, "rb") as f:
            ca = f.read()
        with self.client(self.args.write_token, ca=ca) as writer:
            assert list(writer.insert(self.filter, ["alice", b"bob"])) == [InsertResult.INSERTED] * 2
        with self.client(self.args.read_token) as reader:
            assert list(reader.lookup(self.filter, ["alice", "bob", "mallory"])) == [
                True, True, False]

    def check_wrong_token(self):
        # Well formed, but not in the access file.
        with self.client("ck_" + "A" * 43) as stranger:
            expect_error(grpc.StatusCode.UNAUTHENTICATED, stranger.lookup, self.filter, ["alice"])
            expect_error(grpc.StatusCode.UNAUTHENTICATED, stranger.list_filters)

    def check_no_token(self):
        # "": no token, even with CUCKOO_TOKEN set.
        with self.client("") as anonymous:
            expect_error(grpc.StatusCode.UNAUTHENTICATED, anonymous.lookup, self.filter, ["a"])

    def check_read_token_cannot_insert(self):
        with self.client(self.args.read_token) as reader:
            e = expect_error(grpc.StatusCode.PERMISSION_DENIED, reader.insert, self.filter, ["eve"])
            for part in ("Insert", f'"{self.filter}"', "write"):
                assert part in e.message, e.message
            assert list(reader.lookup(self.filter, ["eve"])) == [False]

    def check_plaintext_refused(self):
        # The right token over a plaintext channel to the TLS port: no answer.
        client = cuckoo_client.Client(self.args.target, token=self.args.admin_token, timeout=3,
                                      retry_timeout=0)
        with client:
            expect_error(grpc.StatusCode.UNAVAILABLE, client.list_filters)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="the cuckood, host:port")
    parser.add_argument("--ca", required=True, help="the CA certificate (PEM) of the server's")
    parser.add_argument("--admin-token", required=True, help="a token granted admin:*")
    parser.add_argument("--write-token", required=True, help="a token granted write:*")
    parser.add_argument("--read-token", required=True, help="a token granted read:*")
    checks = Checks(parser.parse_args())
    names = [n for n in Checks.__dict__ if n.startswith("check_")]  # In definition order.
    return run_checks(checks, names)


if __name__ == "__main__":
    sys.exit(main())
