#!/usr/bin/python3
"""A short tour of the cuckoo_client package against a running cuckood.

    VENV/bin/python client/python/example.py --target localhost:50051

with the wheel installed in VENV (client/python/README.md), or from the build tree:

    ninja -C build/release cuckoo_python
    PYTHONPATH=build/release/python /usr/bin/python3 client/python/example.py \\
        --target localhost:50051

Creates a filter, inserts keys, looks them up, counts and deletes some, shows
the filter's info and drops it. Exits 1 with the server's error if a call fails.
"""

import argparse
import os
import sys

# Python puts this script's directory first on sys.path, and it holds the
# wrapper's source (client/python/cuckoo_client) without the generated
# modules: take it off, so the installed package (or the built one on
# PYTHONPATH) is the one imported.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

try:
    import cuckoo_client
except ImportError as e:
    sys.exit(f"cannot import cuckoo_client: {e}\nInstall its wheel (client/python/README.md) and "
             "run with that Python, or build it (ninja -C build/release cuckoo_python) and run "
             "with PYTHONPATH=build/release/python, using /usr/bin/python3.")


def main() -> int:
    parser = argparse.ArgumentParser(description="A short tour of the cuckoo_client package.")
    parser.add_argument("--target", default=cuckoo_client.DEFAULT_TARGET,
                        help="the cuckood, host:port, or the replicas of a cluster, "
                             "host1:port,host2:port,... (default %(default)s)")
    parser.add_argument("--retry-timeout", type=float, default=5.0,
                        help="seconds to retry a call that finds no server (default "
                             "%(default)s; the Client's default is 30, enough to ride through a "
                             "cluster's leader election)")
    parser.add_argument("--filter", default="example-users",
                        help="name of the filter to create and drop (default %(default)s)")
    args = parser.parse_args()
    name = args.filter

    try:
        with cuckoo_client.Client(args.target, timeout=10,
                                  retry_timeout=args.retry_timeout) as client:
            server = client.server_info()
            print(f"cuckood {server.version} at {args.target}: {client.health()}")
            print(f"mode {server.mode}, log applied to position {server.applied_log_position}"
                  + (f", replica {server.cluster.replica_id} ({server.cluster.lag} behind)"
                     if server.cluster else ""))

            info = client.create_filter(name, capacity=100_000, false_positive_rate=0.001,
                                        if_not_exists=True)
            print(f"{'created' if info.created else 'using existing'} filter {info.name}: "
                  f"capacity {info.capacity}, {info.fingerprint_bits}-bit fingerprints, "
                  f"{info.memory_bytes} bytes")

            # Keys are str (sent as UTF-8) or bytes.
            keys = ["alice", "bob", b"\x00carol"]
            for key, result in zip(keys, client.insert(name, keys)):
                print(f"insert {key!r}: {result.name}")
            # if_absent: a key the filter already holds is not added again.
            for key, result in zip(["alice", "dave"], client.insert(name, ["alice", "dave"],
                                                                    if_absent=True)):
                print(f"insert if absent {key!r}: {result.name}")

            queries = ["alice", "bob", b"\x00carol", "dave", "mallory"]
            for key, present in zip(queries, client.lookup(name, queries)):
                # False is certain; True is "probably" (about 0.1% of absent keys say True).
                print(f"lookup {key!r}: {'present' if present else 'absent'}")
            print(f"count 'alice': {client.count(name, ['alice'])[0]}")

            for key, result in zip(["bob", "erin"], client.delete(name, ["bob", "erin"])):
                print(f"delete {key!r}: {result.name}")
            print(f"lookup 'bob' after delete: {client.lookup(name, ['bob'])[0]}")

            info = client.get_filter(name)
            print(f"filter {name}: {info.items} items, load factor {info.load_factor:.6f}, "
                  f"expected false-positive rate {info.expected_false_positive_rate:.2e}")

            # Errors are CuckooError, with the gRPC code and the server's message.
            try:
                client.lookup("no-such-filter", ["alice"])
            except cuckoo_client.CuckooError as e:
                print(f"lookup in a missing filter: {e}")

            print(f"dropped {name}: freed {client.drop_filter(name)} bytes")
            # Every write's log position; reads ask a replica to have applied this far.
            print(f"last log position seen: {client.last_log_position}")
    except cuckoo_client.CuckooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
