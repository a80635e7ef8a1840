#!/usr/bin/python3
"""A hostile and careless client against a real cuckood, watching its memory.

Run by tests/e2e/hostile_client_test.cc, which starts the server with small
limits and passes its pid and the memory bound to hold:

    PYTHONPATH=build/release/python /usr/bin/python3 tests/e2e/hostile_client.py \\
        --target 127.0.0.1:50051 --pid 1234 --bound-mib 240

Raw request bytes go through gRPC's generic calls (what any language's
client can send), next to the generated stubs for the other calls. While the
attacks run, a monitor thread reads the server's resident memory every 10 ms
(VmRSS; VmHWM at the end) and asks the health service every 200 ms with a
2 s deadline. Prints "ok <attack> <status codes seen>" or "FAIL <attack>: why"
per attack, then "peak_rss_mib N", "health_failures N" and "<n> attacks
passed" (exit 0) or "<k> of <n> attacks FAILED" (exit 1).
"""

import argparse
import collections
import gzip
import os
import sys
import threading
import time
import traceback

import grpc

from cuckoo_client.cuckoo.v1 import filter_service_pb2 as pb
from cuckoo_client.cuckoo.v1 import filter_service_pb2_grpc as pb_grpc
from cuckoo_client.grpc.health.v1 import health_pb2, health_pb2_grpc

MiB = 1 << 20
OPTIONS = [("grpc.max_send_message_length", 1 << 30),
           ("grpc.max_receive_message_length", 1 << 30)]


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def keys_request(filter_name, keys):
    """A LookupRequest (or Insert/Delete/Count: same fields), encoded by hand."""
    name = filter_name.encode()
    parts = [b"\x0a" + varint(len(name)) + name]
    for k in keys:
        parts.append(b"\x12" + varint(len(k)) + k)
    return b"".join(parts)


def repeated_keys_request(filter_name, key, n):
    """keys_request with n copies of one key, built without a list."""
    name = filter_name.encode()
    return b"\x0a" + varint(len(name)) + name + (b"\x12" + varint(len(key)) + key) * n


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Monitor:
    """Samples the server's RSS and checks its health in the background."""

    def __init__(self, target, pid):
        self.pid = pid
        self.peak_kib = 0
        self.health_failures = []
        self.health_checks = 0
        self.stopped = threading.Event()
        self.target = target
        self.channel = grpc.insecure_channel(target)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.threads = [threading.Thread(target=self.sample, daemon=True),
                        threading.Thread(target=self.check_health, daemon=True)]
        for t in self.threads:
            t.start()

    def sample(self):
        while not self.stopped.is_set():
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid))
            time.sleep(0.01)

    def check_health(self):
        """As an orchestrator's probe would: a failure on the kept connection
        (gRPC closes some connections when over its memory quota, with a
        GOAWAY even to a new one while the quota stays full) is retried on a
        new connection, 0.1 s apart, and counted only when three attempts in a
        row fail (Kubernetes' default failureThreshold is 3, on a 10 s
        period)."""
        while not self.stopped.is_set():
            failure = None
            for attempt in range(3):
                try:
                    r = self.health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    failure = (None if r.status == health_pb2.HealthCheckResponse.SERVING
                               else f"status {r.status}")
                except grpc.RpcError as e:
                    failure = f"{e.code().name}: {e.details()}"
                if failure is None:
                    break
                if attempt < 2:
                    time.sleep(0.1)
                    self.channel.close()
                    self.channel = grpc.insecure_channel(self.target)
                    self.health = health_pb2_grpc.HealthStub(self.channel)
            if failure is not None:
                self.health_failures.append(failure)
            self.health_checks += 1
            time.sleep(0.2)

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join()
        self.peak_kib = max(self.peak_kib, rss_kib(self.pid, "VmHWM"))


class Attacks:
    def __init__(self, target, pid, slow=False):
        self.target = target
        self.pid = pid
        self.slow = slow
        self.channel = grpc.insecure_channel(target, options=OPTIONS)
        self.stub = pb_grpc.FilterServiceStub(self.channel)
        self.info = self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)

    def raw(self, method, channel=None):
        return (channel or self.channel).unary_unary(f"/cuckoo.v1.FilterService/{method}")

    def expect_code(self, codes, fn, *args, **kwargs):
        """Calls fn; returns the status code name, which must be in `codes`."""
        try:
            fn(*args, **kwargs)
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
            detail = e.details()
        else:
            detail = ""
        assert code in codes, f"{code}: {detail} (expected {codes})"
        return code

    # -- The attacks. Each is one method; they run in the order below. --

    def attack_fill_the_budget(self):
        """Filters up to the memory budget, their pages touched by inserts."""
        budget = self.info.memory_budget_bytes
        used = 0
        n = 0
        while True:
            try:
                r = self.stub.CreateFilter(pb.CreateFilterRequest(
                    name=f"fill-{n}", capacity=4_000_000, seed=n), timeout=30)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                assert "memory budget" in e.details(), e.details()
                break
            used += r.filter.memory_bytes
            # 20,000 keys touch nearly every 4 KiB page of a 6 MiB table.
            keys = [b"%d:%d" % (n, i) for i in range(20_000)]
            self.raw("Insert")(keys_request(f"fill-{n}", keys), timeout=60)
            n += 1
        assert n > 0 and used <= budget, (n, used, budget)
        info = self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
        assert info.memory_used_bytes > budget * 0.7, (info.memory_used_bytes, budget)
        return [f"{n} filters, {used / MiB:.0f} of {budget / MiB:.0f} MiB"]

    def attack_empty_keys(self):
        """The largest message of empty keys: 2 bytes each on the wire."""
        body = repeated_keys_request("no-such-filter", b"", (self.info.max_message_bytes - 64) // 2)
        return [self.expect_code({"INVALID_ARGUMENT"}, self.raw("Lookup"), body, timeout=60)]

    def attack_over_the_batch_limit(self):
        body = repeated_keys_request("fill-0", b"k", (self.info.max_message_bytes - 64) // 3)
        return [self.expect_code({"INVALID_ARGUMENT"}, self.raw("Insert"), body, timeout=60)]

    def attack_compressed(self):
        """60 MiB of empty keys, gzip-compressed to about 60 KiB."""
        body = repeated_keys_request("fill-0", b"", 30 * MiB)
        return [self.expect_code({"UNIMPLEMENTED"}, self.raw("Lookup"), body, timeout=60,
                                 compression=grpc.Compression.Gzip)]

    def attack_malformed(self):
        codes = []
        for body in [b"\x12\x81\x80\x80\x80\x10k",        # a length over 32 bits
                     b"\x0a\x01f\x12\x01k\x00",            # a trailing 00 tag
                     b"\x12\xff\xff\xff\xff\x07" + b"x" * 100,  # a length past the end
                     b"\x0b" * 200,                        # start-group without end
                     b"\x0a\x02\xff\xfe",                  # a name that is not UTF-8
                     os.urandom(4096)]:
            codes.append(self.expect_code({"INVALID_ARGUMENT"}, self.raw("Insert"), body,
                                          timeout=30))
        return codes

    def attack_concurrent_large_requests(self):
        """32 connections, each sending the largest requests at once."""
        body = repeated_keys_request("no-such-filter", b"", (self.info.max_message_bytes - 64) // 2)
        seen = collections.Counter()
        lock = threading.Lock()

        def one():
            ch = grpc.insecure_channel(self.target, options=OPTIONS)
            call = self.raw("Lookup", ch)
            for _ in range(3):
                try:
                    call(body, timeout=60)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                with lock:
                    seen[code] += 1
            ch.close()

        threads = [threading.Thread(target=one) for _ in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Rejected by the parser; or, past gRPC's memory quota, the stream
        # reset (RESOURCE_EXHAUSTED) or the connection closed (UNAVAILABLE).
        assert set(seen) <= {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE"}, seen
        assert seen["INVALID_ARGUMENT"] > 0, seen
        return [f"{k} x{v}" for k, v in sorted(seen.items())]

    def attack_idle_connections(self):
        """500 connections that each made one call and then sit idle."""
        channels = []
        for _ in range(500):
            ch = grpc.insecure_channel(self.target)
            pb_grpc.FilterServiceStub(ch).GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
            channels.append(ch)
        info = self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
        for ch in channels:
            ch.close()
        return [f"{len(channels)} connections, server answering ({info.filters} filters)"]

    def attack_kick_chains(self):
        """A filter asking for huge kick chains, and one of 1024 one-bucket shards."""
        codes = [self.expect_code({"INVALID_ARGUMENT"}, self.stub.CreateFilter,
                                  pb.CreateFilterRequest(name="kicks", capacity=1024,
                                                         max_kicks=100_000), timeout=10)]
        self.stub.DropFilter(pb.DropFilterRequest(name="fill-0"), timeout=30)  # Room for it.
        self.stub.CreateFilter(pb.CreateFilterRequest(name="tiny", capacity=1024, shards=1024,
                                                      max_kicks=10_000), timeout=10)
        body = keys_request("tiny", [b"t:%d" % i for i in range(12_288)])
        start = time.monotonic()
        self.raw("Insert")(body, timeout=120)
        took = time.monotonic() - start
        # 12,288 keys into 4,096 slots took 101 s of CPU at max_kicks 100000,
        # a whole failing chain per key; now at most one per shard per batch.
        assert took < (300 if self.slow else 30), f"{took:.1f} s"
        self.stub.DropFilter(pb.DropFilterRequest(name="tiny"), timeout=30)
        return codes + [f"12,288 keys into a filter of 4,096 slots in {took:.2f} s"]

    def attack_snapshot_and_drop_floods(self):
        seen = collections.Counter()
        lock = threading.Lock()

        def snap():
            try:
                self.stub.Snapshot(pb.SnapshotRequest(), timeout=60)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            with lock:
                seen["Snapshot " + code] += 1

        def drop(i):
            try:
                self.stub.DropFilter(pb.DropFilterRequest(name=f"none-{i}"), timeout=60)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            with lock:
                seen["DropFilter " + code] += 1

        threads = [threading.Thread(target=snap) for _ in range(100)]
        threads += [threading.Thread(target=drop, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Drops of unknown names are answered without queueing: never
        # RESOURCE_EXHAUSTED, however many wait.
        allowed = {"Snapshot OK", "Snapshot RESOURCE_EXHAUSTED", "DropFilter NOT_FOUND"}
        assert set(seen) <= allowed, seen
        return [f"{k} x{v}" for k, v in sorted(seen.items())]

    def attack_create_and_drop_churn(self):
        """Small filters created and dropped: RSS must come back each round."""
        for n in range(1, 100):  # Make room: drop every filter from the fill.
            try:
                self.stub.DropFilter(pb.DropFilterRequest(name=f"fill-{n}"), timeout=30)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.NOT_FOUND, e
        rounds = []
        for r in range(3):
            for i in range(200):
                self.stub.CreateFilter(pb.CreateFilterRequest(
                    name=f"churn-{i}", capacity=100_000), timeout=10)
                self.raw("Insert")(keys_request(f"churn-{i}", [b"%d" % k for k in range(2000)]),
                                   timeout=30)
            for i in range(200):
                self.stub.DropFilter(pb.DropFilterRequest(name=f"churn-{i}"), timeout=30)
            time.sleep(0.2)
            rounds.append(rss_kib(self.pid) // 1024)
        # A filter's memory is its own mapping, returned when it is dropped:
        # the second and third rounds end where the first did. (Not under a
        # sanitizer, whose quarantine keeps freed memory for a while.)
        assert self.slow or rounds[2] <= rounds[0] + 16, rounds
        return [f"RSS after each round {rounds} MiB"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--bound-mib", type=float, required=True)
    parser.add_argument("--slow", action="store_true",
                        help="a sanitizer build: allow for the server's speed, and do not "
                             "judge its memory")
    args = parser.parse_args()
    attacks = Attacks(args.target, args.pid, slow=args.slow)
    monitor = Monitor(args.target, args.pid)
    names = [n for n in Attacks.__dict__ if n.startswith("attack_")]
    failed = 0
    for name in names:
        try:
            start = time.monotonic()
            what = getattr(attacks, name)()
            print(f"ok {name[len('attack_'):]} {' '.join(what)} "
                  f"({time.monotonic() - start:.1f} s, peak RSS so far "
                  f"{monitor.peak_kib / 1024:.0f} MiB)", flush=True)
        except Exception:  # pylint: disable=broad-except
            failed += 1
            print(f"FAIL {name[len('attack_'):]}", flush=True)
            traceback.print_exc(file=sys.stdout)
    monitor.stop()
    peak_mib = monitor.peak_kib / 1024
    print(f"peak_rss_mib {peak_mib:.1f}")
    print(f"health_checks {monitor.health_checks}")
    print(f"health_failures {len(monitor.health_failures)}")
    for f in monitor.health_failures[:5]:
        print(f"  health: {f}")
    checks = len(names) + 2
    if peak_mib > args.bound_mib:
        failed += 1
        print(f"FAIL memory: peak RSS {peak_mib:.1f} MiB over the bound {args.bound_mib:.1f} MiB")
    if monitor.health_failures or monitor.health_checks == 0:
        failed += 1
        print("FAIL health")
    if failed:
        print(f"{failed} of {checks} attacks FAILED")
        return 1
    print(f"{checks} attacks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
