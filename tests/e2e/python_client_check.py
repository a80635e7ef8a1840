#!/usr/bin/python3
"""End-to-end checks of the Python package cuckoo_client against a real cuckood.

Run by tests/e2e/python_client_test.cc, which starts the server:

    PYTHONPATH=build/release/python /usr/bin/python3 tests/e2e/python_client_check.py \\
        --target 127.0.0.1:50051            # the basic checks
    PYTHONPATH=... /usr/bin/python3 tests/e2e/python_client_check.py \\
        --target 127.0.0.1:50052 --batch    # a server started with --max-batch-keys=1000

Prints "ok <check>" or "FAIL <check>" and a traceback per check, then
"<n> checks passed" (exit 0) or "<k> of <n> checks FAILED" (exit 1). Filters
use 32-bit fingerprints, so absent keys are absent (a false positive has a
probability of about 2e-9 per key) and the expected answers are exact.
"""

import argparse
import importlib.util
import os
import sys
import threading
import traceback

import grpc

import cuckoo_client
from cuckoo_client import CuckooError, DeleteResult, InsertResult
from cuckoo_client.cuckoo.v1 import filter_service_pb2, filter_service_pb2_grpc

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


class Counter(grpc.UnaryUnaryClientInterceptor):
    """Records each unary call's method and how many keys its request held."""

    def __init__(self):
        self.calls = []

    def intercept_unary_unary(self, continuation, details, request):
        keys = list(getattr(request, "keys", []))
        self.calls.append((details.method.rsplit("/", 1)[-1], len(keys), sum(map(len, keys))))
        return continuation(details, request)

    def sizes(self, method):
        """The number of keys of each `method` request, in order."""
        return [n for m, n, _ in self.calls if m == method]


class Checks:
    """The checks; each method named check_* is one."""

    def __init__(self, target):
        self.target = target
        self.client = cuckoo_client.Client(target, timeout=30)

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
        c.drop_filter("py-life-b")
        c.drop_filter("py-seed0")

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
        for call in (lambda: c.create_filter("../x", 100), lambda: c.get_filter("../x"),
                     lambda: c.lookup("../x", ["k"])):
            e = expect_error(grpc.StatusCode.INVALID_ARGUMENT, call)
            assert '"../x"' in e.message, e.message
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

    def check_snapshot(self):
        """snapshot: writes the file; get_filter then reports it."""
        c = self.client
        self.fresh("py-snap")
        c.insert("py-snap", ["a", "b"])
        assert c.get_filter("py-snap").has_unsnapshotted_changes
        assert c.get_filter("py-snap").last_snapshot_time is None
        response = c.snapshot("py-snap")
        assert [f.filter for f in response.files] == ["py-snap"], response
        assert response.files[0].items == 2 and response.files[0].path.endswith("/py-snap.cuckoo")
        info = c.get_filter("py-snap")
        assert not info.has_unsnapshotted_changes and info.unsnapshotted_changes == 0, info
        assert info.last_snapshot_bytes == response.files[0].bytes, info
        assert info.last_snapshot_time.tzinfo is not None, info
        assert "py-snap" in list(c.snapshot(changed_only=True).unchanged)
        expect_error(grpc.StatusCode.NOT_FOUND, c.snapshot, "py-none")
        c.drop_filter("py-snap")

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
        with cuckoo_client.Client("127.0.0.1:1", timeout=10) as dead:
            expect_error(grpc.StatusCode.UNAVAILABLE, dead.server_info)
            expect_error(grpc.StatusCode.UNAVAILABLE, dead.lookup, "f", ["k"])

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
        for bad in (dict(timeout=0), dict(max_batch_keys=0), dict(max_batch_bytes=-1)):
            try:
                cuckoo_client.Client(self.target, **bad)
            except ValueError:
                pass
            else:
                raise AssertionError(f"Client({bad}) did not raise ValueError")

    # -- Batch checks, against a server started with --max-batch-keys=1000 ----

    def counted_client(self, **options):
        """A Client whose calls a Counter records; returns (client, counter)."""
        counter = Counter()
        channel = grpc.intercept_channel(grpc.insecure_channel(self.target), counter)
        return cuckoo_client.Client(channel=channel, **options), counter

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
    failed = 0
    for name in names:
        try:
            getattr(checks, name)()
        except Exception:  # pylint: disable=broad-except
            failed += 1
            print(f"FAIL {name[len('check_'):]}")
            traceback.print_exc(file=sys.stdout)
        else:
            print(f"ok {name[len('check_'):]}")
        sys.stdout.flush()
    if failed:
        print(f"{failed} of {len(names)} checks FAILED")
        return 1
    print(f"{len(names)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
