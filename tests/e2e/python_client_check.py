#!/usr/bin/python3
"""End-to-end checks of the Python package cuckoo_client against a real cuckood.

Run by tests/e2e/python_client_test.cc, which starts the server, with the
python of the virtual environment that the build installs the wheel into
(build/<tree>/python-venv, tests/e2e/CMakeLists.txt) and no PYTHONPATH:

    build/release/python-venv/bin/python tests/e2e/python_client_check.py \\
        --target 127.0.0.1:50051            # the basic checks
    build/release/python-venv/bin/python tests/e2e/python_client_check.py \\
        --target 127.0.0.1:50052 --batch    # a server started with --max-batch-keys=1000

It runs as well against the build tree's package (PYTHONPATH=build/release/python
/usr/bin/python3 tests/e2e/python_client_check.py ...).

Prints "ok <check>" or "FAIL <check>" and a traceback per check, then
"<n> checks passed" (exit 0) or "<k> of <n> checks FAILED" (exit 1). Filters
use 32-bit fingerprints, so absent keys are absent (a false positive has a
probability of about 2e-9 per key) and the expected answers are exact.
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import importlib.util
import io
import os
import re
import socket
import sys
import tempfile
import threading
import time
import uuid

import grpc

import cuckoo_client
from cuckoo_client import CuckooError, DeleteResult, InsertResult
from cuckoo_client.cuckoo.v1 import filter_service_pb2, filter_service_pb2_grpc

from check_runner import run_checks  # tests/e2e/check_runner.py, beside this file

INSERTED = InsertResult.INSERTED
ALREADY_PRESENT = InsertResult.ALREADY_PRESENT
DELETED = DeleteResult.DELETED
NOT_FOUND = DeleteResult.NOT_FOUND


def expect_error(code, fn, *args, **kwargs):
    """Calls fn(*args, **kwargs), which must raise CuckooError with `code`; returns it."""
    try:
        fn(*args, **kwargs)
    except CuckooError as e:
        assert e.code == code, f"expected {code}, got {e!r}"
        assert str(e) == f"{code.name}: {e.message}", str(e)
        return e
    raise AssertionError(f"expected CuckooError {code.name}, got no error")


def free_port():
    """A loopback port no one listens on (the kernel's pick, closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counter(grpc.UnaryUnaryClientInterceptor):
    """Records each unary call's method and how many keys its request held.

    Every attempt the client makes passes here (gRPC's own retries, below
    the interceptor, do not).
    """

    def __init__(self):
        self.calls = []
        self.requests = []  # (method, request message), in order.

    def intercept_unary_unary(self, continuation, details, request):
        keys = list(getattr(request, "keys", []))
        method = details.method.rsplit("/", 1)[-1]
        self.calls.append((method, len(keys), sum(map(len, keys))))
        self.requests.append((method, request))
        return continuation(details, request)

    def sizes(self, method):
        """The number of keys of each `method` request, in order."""
        return [n for m, n, _ in self.calls if m == method]

    def sent(self, method, field):
        """`field` of each `method` request, in order (None: the request has no such field)."""
        return [getattr(r, field, None) for m, r in self.requests if m == method]


class FlakyServer(grpc.GenericRpcHandler):
    """An in-process FilterService whose Lookup and Insert fail UNAVAILABLE at first.

    The first `failures` attempts (counted over both methods) fail; later
    ones answer every key false / INSERTED. `seen` records each attempt as
    (method, keys, request_id), gRPC's own retries included.
    """

    def __init__(self):
        self.failures = 0
        self.seen = []
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(4),
                                  options=[("grpc.max_receive_message_length", 64 << 20)])
        self.server.add_generic_rpc_handlers((self,))
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def reset(self, failures):
        """Fails the next `failures` attempts; forgets what it saw."""
        self.failures, self.seen = failures, []

    def service(self, handler_call_details):
        method = handler_call_details.method.rsplit("/", 1)[-1]
        pb = filter_service_pb2
        if method == "Lookup":
            types = (pb.LookupRequest, pb.LookupResponse)
            answer = lambda n: pb.LookupResponse(present=[False] * n, log_position=7)
        elif method == "Insert":
            types = (pb.InsertRequest, pb.InsertResponse)
            answer = lambda n: pb.InsertResponse(results=[pb.INSERT_RESULT_INSERTED] * n,
                                                 inserted=n, log_position=8)
        else:
            return None

        def handle(request, context):
            self.seen.append((method, len(request.keys), getattr(request, "request_id", None)))
            if len(self.seen) <= self.failures:
                context.abort(grpc.StatusCode.UNAVAILABLE, "flaky")
            return answer(len(request.keys))

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=types[0].FromString,
            response_serializer=types[1].SerializeToString)

    def stop(self):
        self.server.stop(0)


class LossyProxy(grpc.GenericRpcHandler):
    """An in-process proxy in front of the real cuckood that loses answers.

    Forwards every unary FilterService call to the server. The next `n`
    Insert or Delete calls the server answers OK (applied) are answered with
    the failure given to lose() instead, as when an answer never comes back.
    take() returns each Insert and Delete attempt as (method, request_id),
    gRPC's own retries included (each is a call here).
    """

    def __init__(self, upstream):
        self.upstream = grpc.insecure_channel(upstream)
        self.lock = threading.Lock()
        self.to_lose, self.failure, self.seen = 0, None, []
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers((self,))
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def lose(self, n, code, message):
        """Loses the answers of the next `n` applied writes: `code` and `message` instead."""
        with self.lock:
            self.to_lose, self.failure = n, (code, message)

    def take(self):
        """The writes seen since the last take(), as (method, request_id)."""
        with self.lock:
            seen, self.seen = self.seen, []
            return seen

    def service(self, handler_call_details):
        full = handler_call_details.method
        method = full.rsplit("/", 1)[-1]
        if not full.startswith("/cuckoo.v1.FilterService/"):
            return None
        forward = self.upstream.unary_unary(full)  # Bytes in, bytes out.
        parse = {"Insert": filter_service_pb2.InsertRequest,
                 "Delete": filter_service_pb2.DeleteRequest}.get(method)

        def handle(request, context):
            try:
                response = forward(request, timeout=context.time_remaining())
            except grpc.RpcError as e:
                context.abort(e.code(), e.details())
            if parse is None:
                return response
            with self.lock:
                self.seen.append((method, parse.FromString(request).request_id))
                lost = self.to_lose > 0
                if lost:
                    self.to_lose -= 1
            if lost:
                context.abort(*self.failure)
            return response

        return grpc.unary_unary_rpc_method_handler(handle)

    def stop(self):
        self.server.stop(0)
        self.upstream.close()


class Checks:
    """The checks; each method named check_* is one."""

    def __init__(self, target):
        self.target = target
        self.client = cuckoo_client.Client(target, timeout=30)

    def counted_client(self, target=None, options=None, **client_options):
        """A Client whose calls a Counter records; returns (client, counter).

        Its channel has `options` (none by default: no gRPC-level retries),
        e.g. cuckoo_client.channel_options() for the Client's own.
        """
        counter = Counter()
        channel = grpc.intercept_channel(
            grpc.insecure_channel(cuckoo_client.channel_target(target or self.target),
                                  options=options or []), counter)
        return cuckoo_client.Client(channel=channel, **client_options), counter

    def fresh(self, name, capacity=10_000, **settings):
        """Creates filter `name` (dropping any old one) with 32-bit fingerprints."""
        try:
            self.client.drop_filter(name)
        except CuckooError as e:
            assert e.code == grpc.StatusCode.NOT_FOUND, e
        settings.setdefault("fingerprint_bits", 32)
        return self.client.create_filter(name, capacity, **settings)

    # -- Basic checks, against a server with default limits -------------------

    def check_package_layout(self):
        """One top-level package, the generated modules inside it, from the build."""
        package_dir = os.path.dirname(cuckoo_client.__file__)
        for module in (filter_service_pb2, filter_service_pb2_grpc):
            assert os.path.dirname(module.__file__) == os.path.join(package_dir, "cuckoo", "v1")
        assert cuckoo_client.filter_service_pb2 is filter_service_pb2
        assert importlib.util.find_spec("cuckoo") is None, "a top-level `cuckoo` package exists"
        # `grpc` is still grpcio, not cuckoo_client/grpc.
        assert hasattr(grpc, "insecure_channel"), grpc.__file__
        from cuckoo_client.grpc.health.v1 import health_pb2, health_pb2_grpc
        request = health_pb2.HealthCheckRequest.DESCRIPTOR.full_name
        assert request == "grpc.health.v1.HealthCheckRequest", request
        assert health_pb2_grpc.HealthStub.__module__.startswith("cuckoo_client.grpc.health.v1")
        assert cuckoo_client.__version__ == self.client.server_info().version, \
            (cuckoo_client.__version__, self.client.server_info())

    def check_filter_lifecycle(self):
        """create / get / list / drop, their info and their errors."""
        c = self.client
        for name in ("py-life", "py-life-b", "py-seed0"):
            try:
                c.drop_filter(name)
            except CuckooError:
                pass
        info = c.create_filter("py-life", 10_000, fingerprint_bits=16, bucket_size=8, shards=2,
                               max_kicks=100, seed=42)
        assert info.created is True, info
        assert (info.name, info.capacity, info.fingerprint_bits, info.bucket_size, info.shards,
                info.max_kicks, info.seed) == ("py-life", 10_000, 16, 8, 2, 100, 42), info
        assert info.items == 0 and info.load_factor == 0.0 and info.memory_bytes > 0, info
        assert info.slots == info.buckets_per_shard * info.bucket_size * info.shards, info
        assert info.slots >= 10_000 and info.hash_id == 1, info
        assert info.semi_sort is False, info  # Explicit fingerprint bits: packed.
        assert isinstance(info.raw, filter_service_pb2.FilterInfo)
        # The same settings with if_not_exists: the existing filter, created=False.
        again = c.create_filter("py-life", 10_000, fingerprint_bits=16, bucket_size=8, shards=2,
                                max_kicks=100, seed=42, if_not_exists=True)
        assert again.created is False, again
        assert again.seed == 42 and again.memory_bytes == info.memory_bytes, again
        expect_error(grpc.StatusCode.ALREADY_EXISTS, c.create_filter, "py-life", 10_000,
                     fingerprint_bits=16, bucket_size=8, shards=2, max_kicks=100, seed=42)
        expect_error(grpc.StatusCode.ALREADY_EXISTS, c.create_filter, "py-life", 20_000,
                     if_not_exists=True)
        got = c.get_filter("py-life")
        assert got.created is None, got
        assert got == cuckoo_client.FilterInfo(**{**info.__dict__, "created": None}), got
        # An explicit seed of 0 is a seed, not "unset" (proto3 optional).
        assert c.create_filter("py-seed0", 100, seed=0).seed == 0
        # Defaults: 0.002 -> 12 bits with 4-slot buckets, semi-sorted.
        b = c.create_filter("py-life-b", 1000)
        assert (b.fingerprint_bits, b.bucket_size, b.max_kicks, b.semi_sort) == \
            (12, 4, 2000, True), b
        names = [f.name for f in c.list_filters()]
        assert names == sorted(names), names
        assert {"py-life", "py-life-b", "py-seed0"} <= set(names), names
        assert c.drop_filter("py-life") == info.memory_bytes
        e = expect_error(grpc.StatusCode.NOT_FOUND, c.get_filter, "py-life")
        assert str(e) == 'NOT_FOUND: filter "py-life" not found', str(e)
        expect_error(grpc.StatusCode.NOT_FOUND, c.drop_filter, "py-life")
        assert "py-life" not in [f.name for f in c.list_filters()]
        # rename_filter: RENAMENX's refusal, then RENAME's replacement.
        r = c.rename_filter("py-life-b", "py-life")
        assert r.replaced is False and r.log_position > 0, r
        assert c.last_log_position >= r.log_position
        expect_error(grpc.StatusCode.ALREADY_EXISTS, c.rename_filter, "py-seed0", "py-life")
        seed0_bytes = c.get_filter("py-seed0").memory_bytes
        r = c.rename_filter("py-life", "py-seed0", replace=True)
        assert r.replaced is True and r.replaced_freed_bytes == seed0_bytes, r
        expect_error(grpc.StatusCode.NOT_FOUND, c.rename_filter, "py-life", "x")
        names = {f.name for f in c.list_filters()}
        assert "py-seed0" in names and not {"py-life", "py-life-b"} & names, names
        c.drop_filter("py-seed0")

    def check_filter_expiry(self):
        """set_filter_expiry sets and clears expire_at; FilterInfo shows it; a past time drops."""
        c = self.client
        info = c.create_filter("py-expiry", 1000)
        assert info.expire_at is None, info
        at = datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)
        r = c.set_filter_expiry("py-expiry", at)
        assert r.changed and not r.dropped, r
        assert c.get_filter("py-expiry").expire_at == at
        r = c.set_filter_expiry("py-expiry", None)
        assert r.changed and not r.HasField("expire_at"), r
        assert c.get_filter("py-expiry").expire_at is None
        past = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)
        r = c.set_filter_expiry("py-expiry", past)
        assert r.dropped, r
        expect_error(grpc.StatusCode.NOT_FOUND, c.get_filter, "py-expiry")
        expect_error(grpc.StatusCode.NOT_FOUND, c.set_filter_expiry, "py-expiry", at)

    def check_growing_filter(self):
        """growth_factor / max_capacity: sent, reported, compared, and the filter grows."""
        c = self.client
        try:
            c.drop_filter("py-grows")
        except CuckooError as e:
            assert e.code == grpc.StatusCode.NOT_FOUND, e
        info = c.create_filter("py-grows", 1000, false_positive_rate=0.01, seed=5,
                               growth_factor=2, max_capacity=1_000_000)
        assert (info.growth_factor, info.max_capacity, info.false_positive_rate) == \
            (2, 1_000_000, 0.01), info
        # Off by default.
        fixed = self.fresh("py-fixed", 1000)
        assert (fixed.growth_factor, fixed.max_capacity, fixed.false_positive_rate) == \
            (0, 0, 0.0), fixed
        c.drop_filter("py-fixed")
        e = expect_error(grpc.StatusCode.ALREADY_EXISTS, c.create_filter, "py-grows", 1000,
                         false_positive_rate=0.01, seed=5, growth_factor=4,
                         max_capacity=1_000_000, if_not_exists=True)
        assert "growth_factor 2 (requested 4)" in str(e), str(e)
        e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, c.create_filter, "py-bad", 1000,
                         max_capacity=5000)
        assert "needs growth_factor" in str(e), str(e)
        keys = [f"grow-{i}" for i in range(20_000)]
        results = c.insert("py-grows", keys)
        assert all(r == cuckoo_client.InsertResult.INSERTED for r in results), \
            sum(r != cuckoo_client.InsertResult.INSERTED for r in results)
        assert all(c.lookup("py-grows", keys))
        grown = c.get_filter("py-grows")
        assert grown.items == 20_000, grown
        assert len(grown.generations) > 1, grown
        assert all(isinstance(g, cuckoo_client.Generation) for g in grown.generations)
        assert sum(g.items for g in grown.generations) == 20_000, grown.generations
        assert 0 < grown.false_positive_bound <= 0.01, grown
        assert grown.reachable_capacity >= 1_000_000, grown
        assert len(grown.generations) <= grown.max_generations, grown
        c.drop_filter("py-grows")

    def check_semi_sort(self):
        """semi_sort=True/False/None: sent, reported, checked, and the filter works."""
        c = self.client
        semi = self.fresh("py-semi", 10_000, fingerprint_bits=12, shards=1, seed=7,
                          semi_sort=True)
        assert semi.semi_sort is True and semi.raw.semi_sort is True, semi
        assert semi.fingerprint_bits == 12 and semi.bucket_size == 4, semi
        packed = self.fresh("py-packed", 10_000, fingerprint_bits=12, shards=1, seed=7,
                            semi_sort=False)
        assert packed.semi_sort is False, packed
        # 11 bits per slot instead of 12, same slots.
        assert semi.slots == packed.slots, (semi, packed)
        assert semi.memory_bytes < packed.memory_bytes, (semi, packed)
        assert c.get_filter("py-semi").semi_sort is True
        assert {f.name: f.semi_sort for f in c.list_filters()
                if f.name.startswith("py-")} == {"py-semi": True, "py-packed": False}
        # Unset: the server's choice (semi-sorted for a rate-derived f = 13).
        auto = self.fresh("py-auto", 1000, fingerprint_bits=None, false_positive_rate=0.001)
        assert (auto.fingerprint_bits, auto.semi_sort) == (13, True), auto
        keys = [f"semi-{i}" for i in range(5_000)]
        assert c.insert("py-semi", keys) == [INSERTED] * len(keys)
        assert c.lookup("py-semi", keys) == [True] * len(keys)
        assert c.count("py-semi", keys[:10]) == [1] * 10
        assert c.delete("py-semi", keys[:10]) == [DELETED] * 10
        assert c.get_filter("py-semi").items == len(keys) - 10
        # The same settings under if_not_exists return it; the other kind fails.
        again = c.create_filter("py-semi", 10_000, fingerprint_bits=12, shards=1, seed=7,
                                semi_sort=True, if_not_exists=True)
        assert again.created is False and again.semi_sort is True, again
        e = expect_error(grpc.StatusCode.ALREADY_EXISTS, c.create_filter, "py-semi", 10_000,
                         fingerprint_bits=12, shards=1, seed=7, semi_sort=False,
                         if_not_exists=True)
        assert "table kind semi_sorted (requested packed)" in e.message, e.message
        e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, c.create_filter, "py-semi-bad", 1000,
                         bucket_size=2, semi_sort=True)
        assert "semi_sort" in e.message and "bucket_size" in e.message, e.message
        for name in ("py-semi", "py-packed", "py-auto"):
            c.drop_filter(name)

    def check_insert_lookup_str_and_bytes(self):
        """str and bytes keys are all found after insert; absent keys are not."""
        c = self.client
        self.fresh("py-keys")
        keys = ["alice", "bob", "ünïcödé", "日本語", b"\x00\xff\x00", b"carol",
                bytearray(b"dave")]
        assert c.insert("py-keys", keys) == [INSERTED] * len(keys)
        assert c.lookup("py-keys", keys) == [True] * len(keys)
        # A str is its UTF-8 bytes, and the other way round.
        assert c.lookup("py-keys", ["ünïcödé".encode(), "carol", b"alice"]) == [True] * 3
        # Any iterable; results in order.
        absent = (f"absent-{i}" for i in range(200))
        assert c.lookup("py-keys", absent) == [False] * 200
        mixed = ["nobody", "alice", b"nothing", b"\x00\xff\x00", "bob "]
        assert c.lookup("py-keys", mixed) == [False, True, False, True, False]
        assert c.get_filter("py-keys").items == len(keys)
        assert c.insert("py-keys", []) == [] and c.lookup("py-keys", iter(())) == []
        c.drop_filter("py-keys")

    def check_if_absent(self):
        """if_absent: ALREADY_PRESENT for held keys and repeats within a call."""
        c = self.client
        self.fresh("py-absent")
        assert c.insert("py-absent", ["x", "y", "x"], if_absent=True) == \
            [INSERTED, INSERTED, ALREADY_PRESENT]
        assert c.insert("py-absent", [b"x", "z"], if_absent=True) == [ALREADY_PRESENT, INSERTED]
        # Without if_absent a key is added again.
        assert c.insert("py-absent", ["x"]) == [INSERTED]
        assert c.get_filter("py-absent").items == 4
        c.drop_filter("py-absent")

    def check_delete(self):
        """delete: DELETED per held copy, then NOT_FOUND."""
        c = self.client
        self.fresh("py-delete")
        c.insert("py-delete", ["k1", "k2", "k2"])
        assert c.delete("py-delete", ["k1", "k2", "k2", "k2", "never"]) == \
            [DELETED, DELETED, DELETED, NOT_FOUND, NOT_FOUND]
        assert c.lookup("py-delete", ["k1", "k2"]) == [False, False]
        assert c.get_filter("py-delete").items == 0
        c.drop_filter("py-delete")

    def check_count(self):
        """count: copies held per key."""
        c = self.client
        self.fresh("py-count")
        c.insert("py-count", ["dup", "one", "dup", "dup"])
        assert c.count("py-count", ["dup", "one", "none", b"dup"]) == [3, 1, 0, 3]
        c.delete("py-count", ["dup"])
        assert c.count("py-count", ["dup"]) == [2]
        c.drop_filter("py-count")

    def check_errors(self):
        """CuckooError code and message for unknown filters, bad names, bad keys."""
        c = self.client
        unknown = 'filter "no-such-filter" not found'
        for method in (c.insert, c.lookup, c.delete, c.count):
            e = expect_error(grpc.StatusCode.NOT_FOUND, method, "no-such-filter", ["k"])
            assert e.message == unknown and e.applied == 0, repr(e)
            assert str(e) == "NOT_FOUND: " + unknown, str(e)
        expect_error(grpc.StatusCode.NOT_FOUND, c.get_filter, "no-such-filter")
        # Names are Redis keys ("../x" is one); 513 bytes is too long.
        long_name = "x" * 513
        for call in (lambda: c.create_filter(long_name, 100), lambda: c.get_filter(long_name),
                     lambda: c.lookup(long_name, ["k"])):
            e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, call)
            assert "filter name is 513 bytes; at most 512 are allowed" in e.message, e.message
        # Key-shaped names work over gRPC as over RESP.
        for name in ("py:users:seen", "py/a/b", "../py", "py filter"):
            c.create_filter(name, 100)
            assert c.insert(name, ["k"]) is not None
            assert c.lookup(name, ["k", "nope"]) == [True, False], name
            c.drop_filter(name)
        expect_error(grpc.StatusCode.INVALID_ARGUMENT, c.create_filter, "py-bad", 0)
        self.fresh("py-errors")
        e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, c.insert, "py-errors", ["a", ""])
        assert e.message.startswith("keys[1] is empty"), e.message
        assert e.applied == 0 and "applied" not in e.message, repr(e)
        # A rejected request changed nothing.
        assert c.lookup("py-errors", ["a"]) == [False]
        too_long = b"k" * (c.server_info().max_key_bytes + 1)
        e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, c.lookup, "py-errors", [too_long])
        assert e.message.startswith("keys[0] is"), e.message
        # Client-side mistakes are TypeErrors, before any call.
        for bad in ("abc", b"abc", [1], [None]):
            try:
                c.insert("py-errors", bad)
            except TypeError:
                pass
            else:
                raise AssertionError(f"insert of {bad!r} did not raise TypeError")
        assert c.get_filter("py-errors").items == 0
        c.drop_filter("py-errors")

    def check_health(self):
        """The standard health service reports SERVING."""
        assert self.client.health() == "SERVING"
        assert self.client.health("cuckoo.v1.FilterService") == "SERVING"
        expect_error(grpc.StatusCode.NOT_FOUND, self.client.health, "no.such.Service")

    def check_server_info(self):
        """server_info: version and limits."""
        info = self.client.server_info()
        assert info.version and info.max_batch_keys > 0 and info.max_key_bytes > 0, info
        assert info.max_message_bytes >= 4096 and info.max_filters > 0, info
        assert info.filters == len(self.client.list_filters()), info
        # A single node: no cluster, a 2-minute dedup window by default.
        assert info.mode == "single" and info.cluster is None, info
        assert info.dedup_window == datetime.timedelta(minutes=2), info
        assert info.applied_log_position == info.raw.applied_log_position, info
        assert isinstance(info.raw, filter_service_pb2.GetServerInfoResponse)

    def check_snapshot(self):
        """snapshot: writes the file; get_filter then reports it."""
        c = self.client
        self.fresh("py-snap")
        c.insert("py-snap", ["a", "b"])
        assert c.get_filter("py-snap").has_unsnapshotted_changes
        assert c.get_filter("py-snap").last_snapshot_time is None
        response = c.snapshot("py-snap")
        assert [f.filter for f in response.files] == ["py-snap"], response
        # Named by the SHA-256 of the name, never by the name (docs/SNAPSHOT_FORMAT.md).
        digest = hashlib.sha256(b"py-snap").hexdigest()
        assert response.files[0].items == 2 and response.files[0].path.endswith(
            f"/f-{digest}.cuckoo"), response.files[0].path
        info = c.get_filter("py-snap")
        assert not info.has_unsnapshotted_changes and info.unsnapshotted_changes == 0, info
        assert info.last_snapshot_bytes == response.files[0].bytes, info
        assert info.last_snapshot_time.tzinfo is not None, info
        assert "py-snap" in list(c.snapshot(changed_only=True).unchanged)
        expect_error(grpc.StatusCode.NOT_FOUND, c.snapshot, "py-none")
        c.drop_filter("py-snap")

    def check_export_import(self):
        """export_filter / import_filter: a backup round trip, and their errors."""
        c = self.client
        self.fresh("py-export", capacity=20_000)
        for name in ("py-imported",):
            try:
                c.drop_filter(name)
            except CuckooError:
                pass
        keys = [f"e{i}" for i in range(5_000)]
        c.insert("py-export", keys)
        out = io.BytesIO()
        exported = c.export_filter("py-export", out)
        assert exported.bytes == len(out.getvalue()) > 0, exported
        assert exported.items == 5_000 and exported.filter.name == "py-export", exported
        assert exported.filter_id > 0 and exported.log_position >= exported.filter_id, exported
        # From a real file (total_bytes is sent) and from a stream (not).
        with tempfile.NamedTemporaryFile() as f:
            f.write(out.getvalue())
            f.flush()
            f.seek(0)
            info = c.import_filter("py-imported", f)
        assert info.name == "py-imported" and info.items == 5_000, info
        assert info.log_position > 0, info
        assert all(c.lookup("py-imported", keys)), "an imported key is missing"
        assert c.get_filter("py-imported").capacity == c.get_filter("py-export").capacity
        expect_error(grpc.StatusCode.ALREADY_EXISTS, c.import_filter, "py-imported",
                     io.BytesIO(out.getvalue()))
        expect_error(grpc.StatusCode.NOT_FOUND, c.export_filter, "py-none", io.BytesIO())
        damaged = bytearray(out.getvalue())
        damaged[len(damaged) // 2] ^= 0x40
        expect_error(grpc.StatusCode.DATA_LOSS, c.import_filter, "py-damaged",
                     io.BytesIO(bytes(damaged)))
        expect_error(grpc.StatusCode.DATA_LOSS, c.import_filter, "py-damaged", io.BytesIO(b""))
        c.drop_filter("py-imported")
        c.drop_filter("py-export")

    def check_threads(self):
        """One Client used from several threads at once."""
        c = cuckoo_client.Client(self.target, max_batch_keys=100)
        self.fresh("py-threads", capacity=50_000)
        results = {}

        def work(t):
            keys = [f"t{t}-{i}" for i in range(2_000)]
            results[t] = (c.insert("py-threads", keys), c.lookup("py-threads", keys))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == [0, 1, 2, 3], results.keys()
        for inserted, present in results.values():
            assert inserted == [INSERTED] * 2_000 and present == [True] * 2_000
        assert c.get_filter("py-threads").items == 8_000
        c.close()
        self.client.drop_filter("py-threads")

    def check_unreachable_server(self):
        """An unreachable server is a CuckooError UNAVAILABLE, not a hang."""
        start = time.monotonic()
        with cuckoo_client.Client("127.0.0.1:1", timeout=10, retry_timeout=0) as dead:
            expect_error(grpc.StatusCode.UNAVAILABLE, dead.server_info)
            expect_error(grpc.StatusCode.UNAVAILABLE, dead.lookup, "f", ["k"])
        # gRPC's own retries (5 attempts, under a second each), none of the client's.
        assert time.monotonic() - start < 5, time.monotonic() - start

    def check_context_manager(self):
        """with Client(...) closes the channel; close() is idempotent."""
        with cuckoo_client.Client(self.target) as client:
            assert client.health() == "SERVING"
        client.close()
        try:
            client.server_info()
        except ValueError:
            pass
        else:
            raise AssertionError("a closed client still made a call")
        for bad in (dict(timeout=0), dict(max_batch_keys=0), dict(max_batch_bytes=-1),
                    dict(retry_timeout=-1)):
            try:
                cuckoo_client.Client(self.target, **bad)
            except ValueError:
                pass
            else:
                raise AssertionError(f"Client({bad}) did not raise ValueError")

    # -- Request ids, log positions, several servers, retries -----------------

    def check_request_id_dedup(self):
        """A repeat of an Insert or Delete request_id is answered, not applied again."""
        c = self.client
        # Ids of this run only: the server remembers ids (with the content)
        # for its dedup window, across filters dropped and made again.
        run = uuid.uuid4().hex[:8]
        self.fresh("py-dedup")
        c.insert("py-dedup", ["k", "k"])
        assert c.count("py-dedup", ["k"]) == [2]
        first = c.delete("py-dedup", ["k"], request_id=f"py-dedup-delete-1-{run}")
        again = c.delete("py-dedup", ["k"], request_id=f"py-dedup-delete-1-{run}")
        assert first == again == [DELETED], (first, again)
        # The first one's answer, log position included; one copy left.
        assert again.log_position == first.log_position > 0, (first.log_position,
                                                              again.log_position)
        assert c.count("py-dedup", ["k"]) == [1]
        # A new id is a new request.
        assert c.delete("py-dedup", ["k"], request_id=f"py-dedup-delete-2-{run}") == [DELETED]
        assert c.count("py-dedup", ["k"]) == [0]
        # The same id with other content is another request too.
        c.insert("py-dedup", ["j"])
        assert c.delete("py-dedup", ["j"], request_id=f"py-dedup-delete-1-{run}") == [DELETED]
        assert c.count("py-dedup", ["j"]) == [0]
        # Inserts likewise: the repeat adds nothing.
        for _ in range(2):
            assert c.insert("py-dedup", ["i"], request_id=f"py-dedup-insert-{run}") == [INSERTED]
        assert c.count("py-dedup", ["i"]) == [1]
        assert c.get_filter("py-dedup").items == 1
        # Bad ids are the caller's mistake, before any call.
        for bad in ("", "has space", "x" * 129, "caf\u00e9", "tab\t"):
            try:
                c.delete("py-dedup", ["i"], request_id=bad)
            except ValueError:
                pass
            else:
                raise AssertionError(f"request_id {bad!r} was taken")
        assert c.count("py-dedup", ["i"]) == [1]
        c.drop_filter("py-dedup")

    def check_generated_request_ids(self):
        """Without request_id each call gets its own; a split batch derives one per request."""
        self.fresh("py-ids")
        client, counter = self.counted_client(max_batch_keys=2)
        client.insert("py-ids", ["k", "k"])
        # Two plain deletes of the same key are two requests: both apply.
        assert client.delete("py-ids", ["k"]) == [DELETED]
        assert client.delete("py-ids", ["k"]) == [DELETED]
        assert client.count("py-ids", ["k"]) == [0]
        ids = counter.sent("Insert", "request_id") + counter.sent("Delete", "request_id")
        assert len(ids) == 3 and len(set(ids)) == 3, ids
        assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
        assert counter.sent("Count", "request_id") == [None]  # Reads have none.
        # A batch of 5 keys in requests of 2: id.0, id.1, id.2; one request: the id itself.
        run = uuid.uuid4().hex[:8]
        client.insert("py-ids", ["a", "b", "c", "d", "e"], request_id=f"batch-{run}")
        assert counter.sent("Insert", "request_id")[1:] == [
            f"batch-{run}.0", f"batch-{run}.1", f"batch-{run}.2"]
        client.insert("py-ids", ["f"], request_id=f"single-{run}")
        assert counter.sent("Insert", "request_id")[-1] == f"single-{run}"
        generated = client.insert("py-ids", ["g", "h", "i"])
        assert generated == [INSERTED] * 3
        split = counter.sent("Insert", "request_id")[-2:]
        assert re.fullmatch(r"[0-9a-f]{32}\.0", split[0]), split
        assert split[1] == split[0][:-1] + "1", split
        # The whole call again with the same id: nothing applied twice.
        assert client.insert("py-ids", ["a", "b", "c", "d", "e"], request_id=f"batch-{run}") == \
            [INSERTED] * 5
        assert client.count("py-ids", ["a", "c", "e"]) == [1, 1, 1]
        # An id with no room left for ".i" in a split batch is refused up front.
        calls = len(counter.calls)
        try:
            client.insert("py-ids", ["x", "y", "z"], request_id="r" * 127)
        except ValueError as e:
            assert "too long" in str(e), e
        else:
            raise AssertionError("a 127-character id was split into longer ones")
        assert len(counter.calls) == calls, counter.calls[calls:]
        client.close()
        self.client.drop_filter("py-ids")

    def check_log_positions(self):
        """Every write moves the log position forward; reads report theirs."""
        c = cuckoo_client.Client(self.target)
        assert c.last_log_position == 0
        self.fresh("py-log")
        created = c.create_filter("py-log", 10_000, fingerprint_bits=32, if_not_exists=True)
        assert created.created is False and created.log_position > 0, created
        assert c.last_log_position >= created.log_position, c.last_log_position
        inserted = c.insert("py-log", ["a", "b"])
        assert isinstance(inserted, list) and isinstance(inserted, cuckoo_client.Results)
        assert inserted == [INSERTED, INSERTED] and inserted.log_position > created.log_position, \
            (inserted.log_position, created.log_position)
        assert c.last_log_position == inserted.log_position
        deleted = c.delete("py-log", ["a"])
        assert deleted.log_position > inserted.log_position, (deleted, inserted)
        looked = c.lookup("py-log", ["a", "b"])
        assert looked == [False, True] and looked.log_position >= deleted.log_position, looked
        counted = c.count("py-log", ["b"])
        assert counted == [1] and counted.log_position >= deleted.log_position
        info = c.get_filter("py-log")
        assert info.log_position >= deleted.log_position and info.created is None, info
        listed = {f.name: f for f in c.list_filters()}
        assert listed["py-log"].log_position >= deleted.log_position, listed["py-log"]
        assert listed["py-log"] == info  # The position is not part of the comparison.
        assert c.server_info().applied_log_position >= c.last_log_position
        before = c.last_log_position
        c.drop_filter("py-log")
        assert c.last_log_position > before, (c.last_log_position, before)
        # Another client starts at 0 and may be handed a position.
        other = cuckoo_client.Client(self.target)
        assert other.last_log_position == 0
        other.last_log_position = c.last_log_position
        assert other.last_log_position == c.last_log_position
        for bad in (-1, 1.5, "3"):
            try:
                other.last_log_position = bad
            except ValueError:
                pass
            else:
                raise AssertionError(f"last_log_position = {bad!r} was taken")
        c.close()
        other.close()

    def check_read_your_writes(self):
        """The largest position seen goes out as min_log_position; OUT_OF_RANGE is not retried."""
        self.fresh("py-ryw")
        # (Limits given: no GetServerInfo, whose applied_log_position counts too.)
        client, counter = self.counted_client(options=cuckoo_client.channel_options(),
                                              max_batch_keys=1000, max_batch_bytes=1 << 20)
        inserted = client.insert("py-ryw", ["a"])
        assert counter.sent("Insert", "min_log_position") == [0]  # Nothing seen before.
        position = client.last_log_position
        assert position == inserted.log_position > 0
        client.lookup("py-ryw", ["a"])
        client.count("py-ryw", ["a"])
        client.get_filter("py-ryw")
        client.list_filters()
        client.delete("py-ryw", ["a"])
        assert counter.sent("Lookup", "min_log_position") == [position]
        assert counter.sent("Count", "min_log_position") == [position]
        assert counter.sent("GetFilter", "min_log_position") == [position]
        assert counter.sent("ListFilters", "min_log_position") == [position]
        assert counter.sent("Delete", "min_log_position") == [position]
        # A position far past the server's log: a single node answers
        # OUT_OF_RANGE at once, and the client does not retry it.
        future = position + 10**12
        client.last_log_position = future
        start = time.monotonic()
        e = expect_error(grpc.StatusCode.OUT_OF_RANGE, client.lookup, "py-ryw", ["a"])
        assert f"min_log_position {future} is past" in e.message, e.message
        e = expect_error(grpc.StatusCode.OUT_OF_RANGE, client.insert, "py-ryw", ["b"])
        assert time.monotonic() - start < 5, time.monotonic() - start
        assert counter.sent("Lookup", "min_log_position")[1:] == [future]
        assert counter.sent("Insert", "min_log_position")[1:] == [future]
        assert client.last_log_position == future
        # Nothing applied; forgetting the position makes it work again.
        client.last_log_position = 0
        assert client.lookup("py-ryw", ["a", "b"]) == [False, False]
        # read_your_writes=False sends none.
        plain, plain_counter = self.counted_client(read_your_writes=False)
        plain.insert("py-ryw", ["c"])
        plain.lookup("py-ryw", ["c"])
        plain.get_filter("py-ryw")
        assert plain.last_log_position > 0
        assert plain_counter.sent("Lookup", "min_log_position") == [0]
        assert plain_counter.sent("Insert", "min_log_position") == [0]
        assert plain_counter.sent("GetFilter", "min_log_position") == [0]
        client.close()
        plain.close()
        self.client.drop_filter("py-ryw")

    def check_multiple_targets(self):
        """Several servers as one channel: the target it makes, and calls through it."""
        target = cuckoo_client.channel_target
        assert target("127.0.0.1:1,127.0.0.2:2") == "ipv4:127.0.0.1:1,127.0.0.2:2"
        assert target(["127.0.0.1:1", " 127.0.0.2:2 "]) == "ipv4:127.0.0.1:1,127.0.0.2:2"
        assert target(["[::1]:5", "[fe80::2]:6"]) == "ipv6:[::1]:5,[fe80::2]:6"
        # IPv4 and IPv6 together: IPv6, with the IPv4 addresses mapped.
        assert target("10.0.0.1:5,[::1]:6") == "ipv6:[::ffff:10.0.0.1]:5,[::1]:6"
        # The same address twice is one.
        assert target("127.0.0.1:7,127.0.0.1:7") == "ipv4:127.0.0.1:7"
        # Host names are resolved now.
        assert target("localhost:9,127.0.0.1:9") == "ipv4:127.0.0.1:9"
        # One target is used as is.
        for one in ("localhost:50051", "dns:///cuckood-ready.ns.svc:50051",
                    "ipv4:10.0.0.1:50051,10.0.0.2:50051", "unix:///tmp/x.sock", ["h:1"]):
            assert target(one) == (one if isinstance(one, str) else one[0]), one
        for bad in ("a,b", "h:1,h:x", "::1:5,h:1", ["h:1", "dns:///h:2"], "h:1,h:70000"):
            try:
                target(bad)
            except ValueError:
                pass
            else:
                raise AssertionError(f"channel_target({bad!r}) did not raise ValueError")
        port = self.target.rsplit(":", 1)[1]
        self.fresh("py-multi")
        # A list of two addresses of this server, and a string of two names for it.
        for servers in ([self.target, f"127.0.0.1:{port}"], f"{self.target},localhost:{port}"):
            with cuckoo_client.Client(servers) as c:
                assert c.channel_target == f"ipv4:127.0.0.1:{port}", c.channel_target
                assert c.target == servers
                assert c.insert("py-multi", ["m"]) == [INSERTED]
                assert c.lookup("py-multi", ["m"]) == [True]
                c.delete("py-multi", ["m"])
        # A replica that is down is passed over: calls go to the live one.
        dead = free_port()
        with cuckoo_client.Client([self.target, f"127.0.0.1:{dead}"], retry_timeout=0) as c:
            assert c.channel_target == f"ipv4:127.0.0.1:{port},127.0.0.1:{dead}", \
                c.channel_target
            for i in range(20):
                assert c.insert("py-multi", [f"k{i}"]) == [INSERTED]
            assert c.lookup("py-multi", [f"k{i}" for i in range(20)]) == [True] * 20
        assert self.client.get_filter("py-multi").items == 20
        self.client.drop_filter("py-multi")

    def check_retry_unavailable(self):
        """UNAVAILABLE is retried for retry_timeout; other codes, and writes without ids, never."""
        closed = f"127.0.0.1:{free_port()}"
        # Through the client's own channel (gRPC's retries too): about 1 s, not at once.
        with cuckoo_client.Client(closed, timeout=10, retry_timeout=1.0) as dead:
            start = time.monotonic()
            e = expect_error(grpc.StatusCode.UNAVAILABLE, dead.lookup, "f", ["k"])
            elapsed = time.monotonic() - start
        assert 1.0 <= elapsed < 5, elapsed
        assert re.search(r"\(after \d+ attempts in \d+\.\d s\)$", e.message), e.message
        # Attempt by attempt, through a channel without gRPC's retries (and
        # with the limits given, so no GetServerInfo comes first).
        limits = dict(max_batch_keys=1000, max_batch_bytes=1 << 20)
        client, counter = self.counted_client(target=closed, retry_timeout=1.0, **limits)
        start = time.monotonic()
        expect_error(grpc.StatusCode.UNAVAILABLE, client.delete, "f", ["k"], request_id="d-1")
        assert time.monotonic() - start >= 1.0, time.monotonic() - start
        ids = counter.sent("Delete", "request_id")
        assert len(ids) >= 3 and set(ids) == {"d-1"}, ids  # Every retry with the same id.
        for call, method in ((lambda: client.insert("f", ["k"]), "Insert"),
                             (lambda: client.count("f", ["k"]), "Count"),
                             (lambda: client.create_filter("f", 10, if_not_exists=True),
                              "CreateFilter")):
            expect_error(grpc.StatusCode.UNAVAILABLE, call)
            assert len(counter.sent(method, "filter" if method != "CreateFilter" else "name")) >= 3
        inserted = counter.sent("Insert", "request_id")
        assert len(set(inserted)) == 1 and re.fullmatch(r"[0-9a-f]{32}", inserted[0]), inserted
        # Writes without a request id, and the health probe: one attempt each.
        for call, method in ((lambda: client.drop_filter("f"), "DropFilter"),
                             (lambda: client.create_filter("f", 10), "CreateFilter")):
            before = len(counter.sent(method, "name"))
            expect_error(grpc.StatusCode.UNAVAILABLE, call)
            assert len(counter.sent(method, "name")) == before + 1, method
        before = len(counter.calls)
        expect_error(grpc.StatusCode.UNAVAILABLE, client.health)
        assert len(counter.calls) == before + 1
        client.close()
        # retry_timeout=0: one attempt.
        client, counter = self.counted_client(target=closed, retry_timeout=0, **limits)
        expect_error(grpc.StatusCode.UNAVAILABLE, client.lookup, "f", ["k"])
        assert len(counter.sent("Lookup", "filter")) == 1
        client.close()
        # Another code from a live server: one attempt, at once.
        client, counter = self.counted_client(retry_timeout=30)
        start = time.monotonic()
        expect_error(grpc.StatusCode.NOT_FOUND, client.delete, "no-such-filter", ["k"])
        expect_error(grpc.StatusCode.NOT_FOUND, client.lookup, "no-such-filter", ["k"])
        assert time.monotonic() - start < 5
        assert [m for m, _, _ in counter.calls if m != "GetServerInfo"] == ["Delete", "Lookup"]
        client.close()

    def check_channel_retries(self):
        """gRPC's retry policy, large requests included, then the client's; one id throughout."""
        flaky = FlakyServer()
        try:
            limits = dict(max_batch_keys=100_000, max_batch_bytes=64 << 20)
            big = [b"%06d" % i + b"x" * 994 for i in range(2_000)]  # 2 MB, one request.
            # gRPC retries a 2 MB request: the retry buffer is raised.
            with cuckoo_client.Client(flaky.target, retry_timeout=0, **limits) as c:
                flaky.reset(2)
                looked = c.lookup("f", big)
                assert len(looked) == 2_000 and looked.log_position == 7
                assert [n for _, n, _ in flaky.seen] == [2_000] * 3, len(flaky.seen)
                # 5 attempts at most: a sixth is the client's, off here.
                flaky.reset(5)
                expect_error(grpc.StatusCode.UNAVAILABLE, c.lookup, "f", ["k"])
                assert len(flaky.seen) == 5, flaky.seen
            # Without the raised buffer, gRPC silently gives up on it after one attempt.
            options = [o for o in cuckoo_client.channel_options() if "retry_buffer" not in o[0]]
            channel = grpc.insecure_channel(flaky.target, options=options)
            with cuckoo_client.Client(channel=channel, retry_timeout=0, **limits) as c:
                flaky.reset(2)
                expect_error(grpc.StatusCode.UNAVAILABLE, c.lookup, "f", big)
                assert len(flaky.seen) == 1, len(flaky.seen)
                flaky.reset(2)
                assert c.lookup("f", ["k"]) == [False] and len(flaky.seen) == 3
            channel.close()
            # Past gRPC's 5 attempts the client goes on, with the same request id.
            with cuckoo_client.Client(flaky.target, retry_timeout=10, **limits) as c:
                flaky.reset(7)
                assert c.insert("f", ["a", "b"]) == [INSERTED] * 2
                assert c.last_log_position == 8
                ids = [rid for _, _, rid in flaky.seen]
                assert len(ids) == 8 and len(set(ids)) == 1, ids
                assert re.fullmatch(r"[0-9a-f]{32}", ids[0]), ids
        finally:
            flaky.stop()

    def check_lost_answers(self):
        """A write whose answer was lost is retried with its request id: applied once."""
        self.fresh("py-lost")
        proxy = LossyProxy(self.target)
        unavailable = (grpc.StatusCode.UNAVAILABLE, "the answer was lost")
        reset = (grpc.StatusCode.RESOURCE_EXHAUSTED, "Received RST_STREAM with error code 11")
        try:
            limits = dict(max_batch_keys=100, max_batch_bytes=1 << 16)  # No GetServerInfo.
            with cuckoo_client.Client(proxy.target, timeout=10, **limits) as c:
                # The server applied the insert, its answer was lost (gRPC's
                # retry), then a delete's stream was reset (the client's retry).
                proxy.lose(1, *unavailable)
                assert c.insert("py-lost", ["a"]) == [INSERTED]
                self.client.insert("py-lost", ["b", "b"])
                proxy.lose(1, *reset)
                assert c.delete("py-lost", ["b"]) == [DELETED]
                assert self.client.count("py-lost", ["a", "b"]) == [1, 1], "applied twice"
                seen = proxy.take()
                assert [m for m, _ in seen] == ["Insert", "Insert", "Delete", "Delete"], seen
                ids = [rid for _, rid in seen]
                assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
                assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2], ids
                # gRPC's 5 attempts, then the client's own: 8 attempts, one id.
                proxy.lose(7, *unavailable)
                assert c.insert("py-lost", ["c"]) == [INSERTED]
                ids = [rid for _, rid in proxy.take()]
                assert len(ids) == 8 and len(set(ids)) == 1, ids
                assert self.client.count("py-lost", ["c"]) == [1]
                # The caller's id, as it is, on every attempt.
                proxy.lose(2, *unavailable)
                assert c.delete("py-lost", ["c"], request_id="py-caller-1") == [DELETED]
                assert proxy.take() == [("Delete", "py-caller-1")] * 3
                assert self.client.count("py-lost", ["c"]) == [0]
                # cuckood's own RESOURCE_EXHAUSTED (a limit) is not retried,
                # nor DEADLINE_EXCEEDED: the caller repeats with the same id.
                proxy.lose(1, grpc.StatusCode.RESOURCE_EXHAUSTED,
                           "the server's filters use all of its memory budget")
                expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, c.insert, "py-lost", ["d"])
                assert len(proxy.take()) == 1
                rid = uuid.uuid4().hex
                proxy.lose(1, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                expect_error(grpc.StatusCode.DEADLINE_EXCEEDED, c.insert, "py-lost", ["e"],
                             request_id=rid)
                assert c.insert("py-lost", ["e"], request_id=rid) == [INSERTED]
                assert proxy.take() == [("Insert", rid)] * 2
                assert self.client.count("py-lost", ["e"]) == [1]
        finally:
            proxy.stop()
        self.client.drop_filter("py-lost")

    # -- Batch checks, against a server started with --max-batch-keys=1000 ----

    def check_batch_limits(self):
        """The server's limit is 1000 keys, and it rejects a request over it."""
        assert self.client.server_info().max_batch_keys == 1000, self.client.server_info()
        self.fresh("py-limit")
        stub = filter_service_pb2_grpc.FilterServiceStub(self.client.channel)
        try:
            stub.Lookup(filter_service_pb2.LookupRequest(
                filter="py-limit", keys=[b"k%d" % i for i in range(1001)]), timeout=30)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert e.details().startswith("batch has more than 1000 keys; the server's limit "
                                          "(--max-batch-keys) is 1000"), e.details()
        else:
            raise AssertionError("the server took 1001 keys in one request")
        self.client.drop_filter("py-limit")

    def check_batch_split(self):
        """25k keys go in 25 requests of 1000; results come back in order."""
        client, counter = self.counted_client()
        self.fresh("py-batch", capacity=100_000)
        keys = [f"key-{i:06d}" for i in range(25_000)]
        assert client.insert("py-batch", keys) == [INSERTED] * 25_000
        assert counter.sizes("Insert") == [1000] * 25, counter.sizes("Insert")
        assert counter.sizes("GetServerInfo") == [0], counter.calls[:3]  # Asked once.
        # Present and absent keys interleaved: the answers must be in that order.
        mixed = [k for i in range(25_000) for k in (keys[i], f"absent-{i:06d}")]
        assert client.lookup("py-batch", mixed) == [True, False] * 25_000
        assert counter.sizes("Lookup") == [1000] * 50
        assert client.count("py-batch", mixed) == [1, 0] * 25_000
        assert client.insert("py-batch", mixed, if_absent=True) == \
            [ALREADY_PRESENT, INSERTED] * 25_000
        assert client.delete("py-batch", mixed[:30_001]) == [DELETED] * 30_001
        assert counter.sizes("Delete") == [1000] * 30 + [1]
        assert client.lookup("py-batch", mixed) == [False] * 30_001 + [True] * 19_999
        assert self.client.get_filter("py-batch").items == 50_000 - 30_001
        assert counter.sizes("GetServerInfo") == [0], "GetServerInfo asked again"
        client.close()
        self.client.drop_filter("py-batch")

    def check_batch_client_limits(self):
        """max_batch_keys / max_batch_bytes of the Client split further."""
        self.fresh("py-batch-opts", capacity=20_000)
        client, counter = self.counted_client(max_batch_keys=300)
        keys = [f"k{i:08d}" for i in range(5_000)]  # 9 bytes each.
        assert client.insert("py-batch-opts", keys) == [INSERTED] * 5_000
        assert counter.sizes("Insert") == [300] * 16 + [200], counter.sizes("Insert")
        client, counter = self.counted_client(max_batch_bytes=1000)
        assert client.lookup("py-batch-opts", keys) == [True] * 5_000
        sizes = counter.sizes("Lookup")
        assert sizes == [111] * 45 + [5], sizes  # floor(1000 / 9) keys, 999 bytes.
        assert all(b <= 1000 for _, _, b in counter.calls), counter.calls
        # The server's key limit still applies when the byte limit allows more.
        client, counter = self.counted_client(max_batch_bytes=1 << 20)
        assert client.count("py-batch-opts", keys) == [1] * 5_000
        assert counter.sizes("Count") == [1000] * 5
        # A key longer than max_batch_bytes travels alone.
        client, counter = self.counted_client(max_batch_bytes=20)
        long = "L" * 50
        assert client.lookup("py-batch-opts", ["a", long, "b"]) == [False] * 3
        assert counter.sizes("Lookup") == [1, 1, 1], counter.sizes("Lookup")
        self.client.drop_filter("py-batch-opts")

    def check_batch_partial_failure(self):
        """A failure in a later request says how many keys were applied."""
        c = self.client
        self.fresh("py-partial")
        keys = [f"p{i}" for i in range(2_500)]
        keys[1_500] = ""
        e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, c.insert, "py-partial", keys)
        max_key_bytes = c.server_info().max_key_bytes
        assert e.message == (f"keys[500] is empty; keys must be 1 to {max_key_bytes} bytes "
                             "(the first 1000 of 2500 keys were applied)"), e.message
        assert e.applied == 1000, repr(e)
        assert c.lookup("py-partial", keys[:1000]) == [True] * 1000
        assert c.lookup("py-partial", keys[1000:1500] + keys[1501:]) == [False] * 1499
        assert c.get_filter("py-partial").items == 1000
        c.drop_filter("py-partial")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="the cuckood, host:port")
    parser.add_argument("--batch", action="store_true",
                        help="run the batch-splitting checks (server has --max-batch-keys=1000)")
    args = parser.parse_args()
    checks = Checks(args.target)
    prefix = "check_batch_" if args.batch else "check_"
    names = [n for n in dir(Checks)
             if n.startswith(prefix) and (args.batch or not n.startswith("check_batch_"))]
    names.sort(key=lambda n: getattr(Checks, n).__code__.co_firstlineno)
    return run_checks(checks, names)


if __name__ == "__main__":
    sys.exit(main())
