#!/usr/bin/python3
"""End-to-end checks of cuckood's Redis port with redis-py (Debian's python3-redis 4.3).

Run by tests/e2e/redis_py_test.cc, which starts the server:

    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379
        # a server started with --redis-listen=127.0.0.1:6379 --redis-error-rate=1e-7
    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379 --admin-token T --reader-token T
        # a server started with --auth-tokens (tokens with admin:* and read:*)
    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379 --rename-checks
        # RENAME / RENAMENX; then, after a restart, --rename-restarted-checks
    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379 --admin-token T --scoped-token T
        # RENAME's grants (tokens with admin:* and admin:rot:*)
    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379 --bloom-fidelity
        # RedisBloom's behaviour: repeated items, error texts, EXPANSION 0
    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379 --expiry-checks
        # key expiry: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, PERSIST, EXPIRETIME

Uses redis-py's own RedisBloom command builders (r.cf(): CF.RESERVE, CF.ADD, ...), so the
arguments are exactly what applications written against RedisBloom send. redis-py 4.3 speaks
RESP2 only. Prints "ok <check>" or "FAIL <check>" and a traceback per check, then
"<n> checks passed" (exit 0) or "<k> of <n> checks FAILED" (exit 1).
"""

import argparse
import sys
import threading
import time
import traceback

import redis
from redis.commands.bf import AbstractBloom
from redis.commands.bf.commands import CFCommands

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


class PipelineCF(CFCommands, AbstractBloom):
    """redis-py's CF command builders, queued on a pipeline (redis-py 4.3 has no r.cf().pipeline())."""

    def __init__(self, pipe):
        self.execute_command = pipe.execute_command


def expect_error(exc_type, text, fn, *args, **kwargs):
    """fn(*args, **kwargs) must raise exc_type whose message contains `text`; returns it."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        assert text in str(e), f"expected {text!r} in {str(e)!r}"
        return e
    raise AssertionError(f"expected {exc_type.__name__} ({text!r}), got no error")


def client(args, **kwargs):
    kwargs.setdefault("socket_timeout", 30)
    return redis.Redis(host="127.0.0.1", port=args.port, **kwargs)


# ---- without authentication -------------------------------------------------------------------


def basic_checks(args):
    r = client(args)
    cf = r.cf()

    @check
    def connection():
        assert r.ping() is True
        assert r.echo("hi") == b"hi"
        assert r.client_setname("redis-py-check") is True
        assert r.client_getname() == "redis-py-check"
        assert isinstance(r.client_id(), int)
        assert r.execute_command("SELECT", 0) in (True, b"OK")
        expect_error(redis.ResponseError, "DB index is out of range", r.execute_command, "SELECT", 1)
        expect_error(redis.ResponseError, "unknown command 'GET'", r.get, "x")

    @check
    def reserve_add_exists():
        assert cf.create("py.f", 1000) is True
        expect_error(redis.ResponseError, "item exists", cf.create, "py.f", 1000)
        assert cf.create("py.opts", 1000, expansion=4, bucket_size=4, max_iterations=50) is True
        info = cf.info("py.opts")
        assert info.bucketSize == 4, info.bucketSize
        assert info.expansionRate == 4, info.expansionRate
        assert info.maxIteration == 50, info.maxIteration
        assert info.filterNum == 1 and info.insertedNum == 0 and info.deletedNum == 0
        assert cf.add("py.f", "a") == 1
        assert cf.add("py.f", b"\x00bin\r\n") == 1
        assert cf.addnx("py.f", "a") == 0
        assert cf.addnx("py.f", "b") == 1
        assert cf.exists("py.f", "a") == 1
        assert cf.exists("py.f", b"\x00bin\r\n") == 1
        assert cf.exists("py.f", "nope") == 0
        assert cf.exists("py.missing", "a") == 0
        assert cf.mexists("py.f", "a", "nope", "b") == [1, 0, 1]
        assert cf.count("py.f", "a") == 1
        assert cf.delete("py.f", "a") == 1
        assert cf.delete("py.f", "a") == 0
        info = cf.info("py.f")
        assert info.insertedNum == 2 and info.deletedNum == 1, vars(info)
        expect_error(redis.ResponseError, "not found", cf.info, "py.missing")
        expect_error(redis.ResponseError, "invalid filter name", cf.add, b"bad\xff", "x")

    @check
    def insert_options():
        assert cf.insert("py.ins", ["a", "b"], capacity=500) == [1, 1]
        assert cf.insertnx("py.ins", ["a", "c"]) == [0, 1]
        assert cf.insert("py.ins", ["d"], nocreate=True) == [1]
        assert r.exists("py.none") == 0
        assert r.type("py.ins") == b"MBbloomCF"
        assert cf.create("py.tiny", 64, expansion=0) is True
        results = cf.insert("py.tiny", [f"k{i}" for i in range(2000)])
        assert results.count(1) >= 64 and results.count(-1) > 0, (results.count(1), results.count(-1))
        assert set(results) == {1, -1}
        expect_error(redis.ResponseError, "Filter is full", cf.add, "py.tiny", "one-more")

    @check
    def keyspace():
        names = {f"py.ks.{i}" for i in range(25)}
        for n in names:
            assert cf.add(n, "x") == 1
        assert set(x.decode() for x in r.keys("py.ks.*")) == names
        assert set(x.decode() for x in r.scan_iter(match="py.ks.*", count=3)) == names
        assert set(x.decode() for x in r.scan_iter(match="py.ks.*", _type="MBbloomCF")) == names
        assert list(r.scan_iter(match="py.ks.*", _type="string")) == []
        total = r.dbsize()
        assert total >= 25
        assert r.exists(*names) == 25
        assert r.delete(*list(names)[:5]) == 5
        assert r.dbsize() == total - 5
        assert "redis_version" in r.info("server")
        assert r.info("keyspace")["db0"]["keys"] == total - 5

    @check
    def pipelined_thousands():
        assert cf.create("py.pipe", 20000) is True
        pipe = r.pipeline(transaction=False)
        pcf = PipelineCF(pipe)
        for i in range(5000):
            pcf.add("py.pipe", f"p{i}")
        assert pipe.execute() == [1] * 5000
        for i in range(5000):
            pcf.exists("py.pipe", f"p{i}")
        assert pipe.execute() == [1] * 5000
        for i in range(3000):
            pcf.add("py.pipe", f"q{i}")
        assert pipe.execute() == [1] * 3000
        # Different commands interleaved, replies in order.
        expected = []
        for i in range(1000):
            pcf.add("py.pipe", f"m{i}")
            expected.append(1)
            pcf.count("py.pipe", f"m{i}")
            expected.append(1)
            pcf.insert("py.pipe", [f"n{i}", f"o{i}"])
            expected.append([1, 1])
            pcf.delete("py.pipe", f"m{i}")
            expected.append(1)
            pcf.exists("py.pipe", f"m{i}")
            expected.append(0)
            pipe.ping()
            expected.append(True)
        assert pipe.execute() == expected
        # Errors stay in place (raise_on_error=False).
        pcf.add("py.pipe", "e1")
        pcf.add(b"bad\xff", "e2")  # Not UTF-8: no filter's name.
        pcf.info("py.missing")
        pcf.exists("py.pipe", "e1")
        out = pipe.execute(raise_on_error=False)
        assert out[0] == 1 and out[3] == 1, out
        assert isinstance(out[1], redis.ResponseError) and "invalid filter name" in str(out[1])
        assert isinstance(out[2], redis.ResponseError) and "not found" in str(out[2])
        assert cf.info("py.pipe").insertedNum == 5000 + 3000 + 1000 * 2 + 1

    @check
    def threads():
        assert cf.create("py.threads", 100000) is True
        errors = []

        def worker(w):
            try:
                c = client(args)
                pipe = c.pipeline(transaction=False)
                pcf = PipelineCF(pipe)
                for batch in range(5):
                    for i in range(1000):
                        pcf.add("py.threads", f"t{w}-{batch}-{i}")
                    assert pipe.execute() == [1] * 1000
                keys = [f"t{w}-{b}-{i}" for b in range(5) for i in range(1000)]
                assert c.cf().mexists("py.threads", *keys) == [1] * 5000
            except Exception:  # noqa: BLE001
                errors.append(traceback.format_exc())

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        assert cf.info("py.threads").insertedNum == 40000

    @check
    def scandump_loadchunk_backup():
        # The backup loop as RedisBloom documents it (CF.SCANDUMP), then the
        # restore under another name (CF.LOADCHUNK).
        n = 100_000
        assert cf.create("py.dump", n) is True
        keys = [f"dump-{i}" for i in range(n)]
        for i in range(0, n, 10_000):
            assert cf.insert("py.dump", keys[i : i + 10_000]) == [1] * 10_000
        chunks = []
        iter = 0
        while True:
            iter, data = cf.scandump("py.dump", iter)
            if iter == 0:
                break
            else:
                chunks.append([iter, data])
            assert len(chunks) < 1000
        assert len(chunks) >= 2, len(chunks)
        for iter, data in chunks:
            assert cf.loadchunk("py.restored", iter, data) in (True, b"OK"), iter
        for i in range(0, n, 10_000):
            assert cf.mexists("py.restored", *keys[i : i + 10_000]) == [1] * 10_000
        assert cf.info("py.restored").insertedNum == n
        assert cf.exists("py.restored", "never-added") == 0
        assert cf.add("py.restored", "after") == 1
        # The original is untouched.
        assert cf.info("py.dump").insertedNum == n

    @check
    def scandump_end():
        # A dump ends with (0, None), as RedisBloom's.
        assert cf.create("py.small", 100) is True
        assert cf.add("py.small", "x") == 1
        iter, data = cf.scandump("py.small", 0)
        while iter != 0:
            iter, data = cf.scandump("py.small", iter)
        assert data is None, f"the last reply's data is {data!r}"


# ---- CF.SCANDUMP / CF.LOADCHUNK: RedisBloom's replies, dumps held by their connection ---------


def dumps_backup(cf, name, copy):
    """RedisBloom's documented backup loop, then the restore: the chunks loaded under `copy`."""
    chunks = []
    iter = 0
    while True:
        iter, data = cf.scandump(name, iter)
        if iter == 0:
            break
        chunks.append((iter, data))
        assert len(chunks) < 1000
    for iter, data in chunks:
        assert cf.loadchunk(copy, iter, data) in (True, b"OK"), iter
    return chunks


def dumps_checks(args):
    r = client(args)
    cf = r.cf()

    @check
    def dumps_empty_filter_round_trip():
        # An empty filter's dump is (0, None) at once, as RedisBloom's: the
        # loop stores no chunk, and the restore creates nothing.
        assert cf.create("dumps.empty", 1000) is True
        assert cf.scandump("dumps.empty", 0) == [0, None]
        assert dumps_backup(cf, "dumps.empty", "dumps.empty-copy") == []
        assert r.exists("dumps.empty-copy") == 0
        expect_error(redis.ResponseError, "not found", cf.scandump, "dumps.missing", 0)

    @check
    def dumps_pool_loop_keeps_one_connection():
        # redis-py's client takes a connection from its pool for each command
        # and gives it back: a loop on one thread gets the same one each time,
        # so the documented loop works on a pooled client.
        n = 50_000
        assert cf.create("dumps.pool", n) is True
        keys = [f"p-{i}" for i in range(n)]
        for i in range(0, n, 10_000):
            assert cf.insert("dumps.pool", keys[i : i + 10_000]) == [1] * 10_000
        pooled = client(args, connection_pool=redis.ConnectionPool(host="127.0.0.1", port=args.port))
        ids = set()
        iter, chunks = 0, []
        while True:
            iter, data = pooled.cf().scandump("dumps.pool", iter)
            ids.add(pooled.client_id())
            if iter == 0:
                break
            chunks.append((iter, data))
        assert len(ids) == 1, ids
        assert len(chunks) >= 2
        for iter, data in chunks:
            assert pooled.cf().loadchunk("dumps.pool-copy", iter, data) in (True, b"OK")
        assert cf.mexists("dumps.pool-copy", *keys[:1000]) == [1] * 1000
        # Another connection's iterator is refused, saying why; the dump goes
        # on on its own connection.
        iter, _ = cf.scandump("dumps.pool", 0)
        expect_error(
            redis.ResponseError,
            "started on another connection: a dump belongs to the connection that started it",
            client(args).cf().scandump,
            "dumps.pool",
            iter,
        )
        while iter != 0:
            iter, _ = cf.scandump("dumps.pool", iter)
        # Clients that go away mid-dump give their slots back (not after
        # --transfer-idle-timeout): new clients start the most again.
        quitters = [client(args) for _ in range(2)]
        for q in quitters:
            for k in ("dumps.pool", "dumps.pool-copy"):
                assert q.cf().scandump(k, 0)[0] != 0
        expect_error(redis.ResponseError, "4 CF.SCANDUMPs are in progress already on all connections",
                     cf.scandump, "dumps.pool", 0)
        for q in quitters:
            q.connection_pool.disconnect()
        fresh = [client(args) for _ in range(2)]
        deadline = time.monotonic() + 10
        while True:  # (The server sees the disconnections a moment later.)
            try:
                fresh[0].cf().scandump("dumps.pool", 0)
                break
            except redis.ResponseError as e:
                assert "in progress already on all connections" in str(e), e
                assert time.monotonic() < deadline, "the slots were not given back"
                time.sleep(0.02)
        assert fresh[0].cf().scandump("dumps.pool-copy", 0)[0] != 0
        for k in ("dumps.pool", "dumps.pool-copy"):
            assert fresh[1].cf().scandump(k, 0)[0] != 0
        for f in fresh:
            f.connection_pool.disconnect()

    @check
    def dumps_million_items_round_trip():
        # The documented loop on a filter of 1,000,000 items, timed.
        n = 1_000_000
        assert cf.create("dumps.million", n) is True
        pipe = r.pipeline(transaction=False)
        for i in range(0, n, 10_000):
            pipe.execute_command("CF.INSERT", "dumps.million", "ITEMS", *[f"m-{j}" for j in range(i, i + 10_000)])
        assert all(x == [1] * 10_000 for x in pipe.execute())
        start = time.monotonic()
        chunks = []
        iter = 0
        while True:
            iter, data = cf.scandump("dumps.million", iter)
            if iter == 0:
                break
            chunks.append((iter, data))
        dumped = time.monotonic()
        for iter, data in chunks:
            assert cf.loadchunk("dumps.million-copy", iter, data) in (True, b"OK")
        loaded = time.monotonic()
        size = sum(len(d) for _, d in chunks)
        assert cf.info("dumps.million-copy").insertedNum == n
        assert cf.mexists("dumps.million-copy", *[f"m-{j}" for j in range(0, n, 997)]) == [1] * len(
            range(0, n, 997)
        )
        print(
            f"dumps: 1,000,000 items, {len(chunks)} chunks, {size} bytes: dump "
            f"{(dumped - start) * 1000:.0f} ms, load {(loaded - dumped) * 1000:.0f} ms",
            flush=True,
        )


def error_checks(args):
    # Argument errors of write commands raise (once they were never answered)
    # and mixed present/absent lookups are right (once they shared scratch
    # memory with the filter's batch path): run with --error-checks.
    r = client(args, socket_timeout=5)
    cf = r.cf()

    @check
    def pipelined_mixed_answers():
        # CF.MEXISTS and pipelined CF.EXISTS (merged into one batch) on a
        # multi-shard filter, present and absent items mixed.
        assert cf.create("py.mixed", 20000) is True
        pipe = r.pipeline(transaction=False)
        pcf = PipelineCF(pipe)
        for i in range(5000):
            pcf.add("py.mixed", f"p{i}")
        assert pipe.execute() == [1] * 5000
        for i in range(5000):
            pcf.exists("py.mixed", f"p{i}")
            pcf.exists("py.mixed", f"absent{i}")
        assert pipe.execute() == [1, 0] * 2500 * 2
        for i in range(3000):
            pcf.addnx("py.mixed", f"p{i}" if i % 2 else f"q{i}")
        assert pipe.execute() == [1, 0] * 1500
        # Different commands interleaved, replies in order.
        expected = []
        for i in range(1000):
            pcf.add("py.mixed", f"m{i}")
            expected.append(1)
            pcf.mexists("py.mixed", f"m{i}", f"never{i}")
            expected.append([1, 0])
            pcf.count("py.mixed", f"m{i}")
            expected.append(1)
            pcf.insert("py.mixed", [f"n{i}", f"o{i}"])
            expected.append([1, 1])
            pcf.delete("py.mixed", f"m{i}")
            expected.append(1)
            pcf.exists("py.mixed", f"m{i}")
            expected.append(0)
            pipe.ping()
            expected.append(True)
        assert pipe.execute() == expected
        args = []
        for i in range(1000):
            args += [f"p{i}", f"absent{i}"]
        assert cf.mexists("py.mixed", *args) == [1, 0] * 1000

    @check
    def write_argument_errors():
        assert cf.add("py.wae", "a") == 1
        expect_error(redis.ResponseError, "Not found", cf.delete, "py.missing", "a")
        expect_error(redis.ResponseError, "not found", cf.insert, "py.none", ["a"], nocreate=True)
        expect_error(redis.ResponseError, "not found", cf.insertnx, "py.none", ["a"], nocreate=True)
        expect_error(redis.ResponseError, "item is empty", cf.add, "py.wae", "")
        pipe = r.pipeline(transaction=False)
        pcf = PipelineCF(pipe)
        pcf.add("py.wae", "b")
        pcf.delete("py.missing", "e3")
        pcf.exists("py.wae", "b")
        out = pipe.execute(raise_on_error=False)
        assert out[0] == 1 and out[2] == 1, out
        assert isinstance(out[1], redis.ResponseError) and "Not found" in str(out[1])


# ---- RedisBloom fidelity: repeated items, error texts, EXPANSION 0 ---------------------------


def bloom_fidelity_checks(args):
    r = client(args)
    cf = r.cf()

    def raw_error(fn, *a, **kw):
        """The error's text exactly as the server sent it (redis-py keeps it as is)."""
        try:
            fn(*a, **kw)
        except redis.ResponseError as e:
            return str(e)
        raise AssertionError("expected an error, got none")

    @check
    def bloom_repeated_item_grows_and_counts():
        # Code that calls CF.ADD seen <id> on every event: RedisBloom grows.
        assert [cf.add("py.bloom.seen", "x") for _ in range(40)] == [1] * 40
        assert cf.count("py.bloom.seen", "x") == 40
        info = cf.info("py.bloom.seen")
        assert info.filterNum > 1 and info.insertedNum == 40, vars(info)
        # Pipelined (one batch on the server), on a CF.RESERVE'd filter.
        assert cf.create("py.bloom.reserved", 1000) is True
        pipe = r.pipeline(transaction=False)
        pcf = PipelineCF(pipe)
        for _ in range(40):
            pcf.add("py.bloom.reserved", "y")
        assert pipe.execute() == [1] * 40
        assert cf.count("py.bloom.reserved", "y") == 40
        assert cf.exists("py.bloom.reserved", "y") == 1

    @check
    def bloom_repeats_stop_at_maximum_expansions():
        assert cf.create("py.bloom.max", 100) is True
        added = 0
        while True:
            try:
                assert cf.add("py.bloom.max", "z") == 1
            except redis.ResponseError as e:
                assert str(e) == "Maximum expansions reached", str(e)
                break
            added += 1
            assert added < 10000, "no limit"
        assert added >= 40, added
        assert cf.count("py.bloom.max", "z") == added
        assert cf.insert("py.bloom.max", ["z"]) == [-1]
        assert cf.exists("py.bloom.max", "z") == 1

    @check
    def bloom_error_texts():
        assert raw_error(cf.create, "py.bloom.e", 1) == "Capacity must be at least (BucketSize * 2)"
        assert raw_error(cf.create, "py.bloom.e", 7, bucket_size=4) == (
            "Capacity must be at least (BucketSize * 2)")
        assert raw_error(cf.create, "py.bloom.e", "lots") == "Bad capacity"
        assert raw_error(cf.create, "py.bloom.e", 100, expansion=40000) == (
            "EXPANSION: value must be an integer between 0 and 32768, inclusive.")
        assert raw_error(cf.create, "py.bloom.e", 100, bucket_size=0) == (
            "BUCKETSIZE: value must be an integer between 1 and 255, inclusive.")
        assert raw_error(cf.create, "py.bloom.e", 100, max_iterations=0) == (
            "MAXITERATIONS: value must be an integer between 1 and 65535, inclusive.")
        big = raw_error(cf.create, "py.bloom.e", 1 << 40)
        assert big.startswith("capacity 1099511627776 is more than"), big
        assert "shards" not in big, big
        largest = int(big.split("the largest accepted is ")[1].split(":")[0])
        assert 4 <= largest < 1 << 40, largest
        over = raw_error(cf.create, "py.bloom.e", largest + 1)
        assert over.startswith(f"capacity {largest + 1} is more than"), over
        assert r.exists("py.bloom.e") == 0
        assert cf.create("py.bloom.e", 4) is True
        assert raw_error(cf.create, "py.bloom.e", 4) == "item exists"
        assert raw_error(cf.delete, "py.bloom.none", "x") == "Not found"
        assert raw_error(cf.insert, "py.bloom.none", ["x"], capacity=3) == (
            "Capacity must be at least (BucketSize * 2)")
        assert raw_error(cf.insert, "py.bloom.none", ["x"], nocreate=True) == "not found"
        assert raw_error(cf.info, "py.bloom.none") == "not found"

    @check
    def bloom_expansion_zero_is_full():
        assert cf.create("py.bloom.fixed", 4, expansion=0) is True
        # All of CF.INFO's fields (redis-py's CFInfo keeps RedisBloom's eight):
        # a client without r.cf()'s reply callbacks.
        info = client(args).execute_command("CF.INFO", "py.bloom.fixed")
        fields = dict(zip(info[::2], info[1::2]))
        slots = fields[b"Number of buckets"] * fields[b"Bucket size"]
        assert fields[b"Max capacity"] == slots, fields
        assert fields[b"Expansion rate"] == 0, fields
        added = 0
        while True:
            try:
                assert cf.add("py.bloom.fixed", f"k{added}") == 1
            except redis.ResponseError as e:
                assert str(e) == "Filter is full", str(e)
                break
            added += 1
            assert added <= slots, (added, slots)
        assert 4 <= added <= slots, (added, slots)
        # Near full a later key may still find room; never more than the slots.
        assert -1 in cf.insert("py.bloom.fixed", [f"more{i}" for i in range(50)])
        info = cf.info("py.bloom.fixed")
        assert info.filterNum == 1 and info.insertedNum <= slots, vars(info)


# ---- transactions and the keyspace commands of issue 33 (--multi-checks) ---------------------


def multi_checks(args):
    # Its own server: FLUSHALL drops every filter.
    r = client(args)
    cf = r.cf()

    @check
    def multi_transactional_pipeline():
        assert cf.create("multi.f", 1000) is True
        pipe = r.pipeline()  # transaction=True: MULTI ... EXEC
        pcf = PipelineCF(pipe)
        pcf.add("multi.f", "a")
        pcf.exists("multi.f", "a")
        pcf.insert("multi.g", ["x", "y"])
        pcf.mexists("multi.g", "x", "z")
        pipe.ping()
        assert pipe.execute() == [1, 1, [1, 1], [1, 0], True]
        # Runtime errors are elements; the commands around them ran.
        pcf.add("multi.f", "b")
        pcf.delete("multi.missing", "b")
        pcf.add("multi.f", "c")
        out = pipe.execute(raise_on_error=False)
        assert out[0] == 1 and out[2] == 1, out
        assert isinstance(out[1], redis.ResponseError) and "Not found" in str(out[1]), out
        assert cf.mexists("multi.f", "b", "c") == [1, 1]
        # The non-transactional pipeline still works beside it.
        plain = r.pipeline(transaction=False)
        ppcf = PipelineCF(plain)
        for i in range(100):
            ppcf.add("multi.f", f"plain{i}")
        assert plain.execute() == [1] * 100

    @check
    def multi_nothing_runs_before_exec():
        # One connection of its own (a pool would hand out others).
        tx = client(args, single_connection_client=True)
        other = client(args)
        assert tx.execute_command("MULTI") in (True, b"OK")
        assert tx.execute_command("CF.ADD", "multi.f", "late") == b"QUEUED"
        assert tx.execute_command("CF.ADD", "multi.new", "k") == b"QUEUED"
        assert other.cf().exists("multi.f", "late") == 0
        assert other.exists("multi.new") == 0
        assert tx.execute_command("EXEC") == [1, 1]
        assert other.cf().exists("multi.f", "late") == 1
        assert other.exists("multi.new") == 1
        # DISCARD drops the queue.
        assert tx.execute_command("MULTI") in (True, b"OK")
        assert tx.execute_command("CF.ADD", "multi.f", "discarded") == b"QUEUED"
        assert tx.execute_command("DISCARD") in (True, b"OK")
        assert other.cf().exists("multi.f", "discarded") == 0
        expect_error(redis.ResponseError, "EXEC without MULTI", tx.execute_command, "EXEC")
        expect_error(redis.ResponseError, "DISCARD without MULTI", tx.execute_command, "DISCARD")

    @check
    def multi_aborted_transaction():
        pipe = r.pipeline()
        pcf = PipelineCF(pipe)
        pcf.add("multi.f", "aborted")
        pipe.execute_command("CF.ADD", "multi.f")  # wrong arity: refused at queue time
        pcf.add("multi.f", "aborted-2")
        # redis-py raises the queue-time error (EXEC answered EXECABORT).
        expect_error(redis.ResponseError, "wrong number of arguments for 'cf.add'", pipe.execute)
        assert cf.mexists("multi.f", "aborted", "aborted-2") == [0, 0]
        pipe.execute_command("NOSUCHCOMMAND")
        expect_error(redis.ResponseError, "unknown command", pipe.execute)
        pipe.reset()

    @check
    def multi_watch_is_refused():
        pipe = r.pipeline()
        expect_error(redis.ResponseError, "WATCH is not supported by cuckood", pipe.watch, "multi.f")
        pipe.reset()  # (nothing watched: no UNWATCH needed)
        assert r.execute_command("UNWATCH") in (True, b"OK")
        # The pipeline is usable after.
        PipelineCF(pipe).add("multi.f", "after-watch")
        assert pipe.execute() == [1]

    @check
    def multi_keyspace_commands():
        for n in ("multi.u1", "multi.u2", "multi.u3"):
            assert cf.add(n, "k") == 1
        assert r.unlink("multi.u1", "multi.u2", "multi.nope") == 2
        assert r.exists("multi.u1", "multi.u2", "multi.u3") == 1
        size = cf.info("multi.u3").size
        assert r.memory_usage("multi.u3") == size > 0, (r.memory_usage("multi.u3"), size)
        assert r.memory_usage("multi.u3", samples=5) == size
        assert r.memory_usage("multi.nope") is None
        modules = r.module_list()
        assert any(m[b"name"] == b"bf" and m[b"ver"] >= 20000 for m in modules), modules
        assert r.execute_command("SELECT", 0) in (True, b"OK")
        assert r.dbsize() > 0
        assert r.flushdb() is True
        assert r.dbsize() == 0
        assert cf.add("multi.after", "k") == 1
        assert r.flushall(asynchronous=True) is True
        assert r.keys("*") == []

    @check
    def multi_client_list_and_kill():
        victim = client(args, single_connection_client=True)
        victim.client_setname("victim")
        victim_id = victim.client_id()
        other = client(args, single_connection_client=True)
        other_id = other.client_id()
        clients = {int(c["id"]): c for c in r.client_list()}
        assert clients[victim_id]["name"] == "victim", clients[victim_id]
        assert clients[victim_id]["db"] == "0" and clients[victim_id]["flags"] == "N"
        assert clients[victim_id]["laddr"].endswith(f":{args.port}"), clients[victim_id]
        assert [c["id"] for c in r.client_list(client_id=[str(victim_id)])] == [str(victim_id)]
        assert r.client_kill_filter(_id=victim_id) == 1
        expect_error(redis.ConnectionError, "", victim.ping)
        assert r.client_kill(clients[other_id]["addr"]) is True
        expect_error(redis.ConnectionError, "", other.ping)
        expect_error(redis.ResponseError, "No such client", r.client_kill, clients[other_id]["addr"])


# ---- filter names are Redis keys (issue 33) ----------------------------------------------------


def redis_names_checks(args):
    r = client(args)
    cf = r.cf()
    names = ["users:seen", "a/b", "../../etc/passwd", "my filter", "n" * 512, "caf\u00e9:\u20ac"]

    @check
    def redis_names_key_shaped_names_are_filters():
        for n in names:
            assert cf.create(n, 1000) is True, n
            assert cf.add(n, "k") == 1, n
            assert cf.exists(n, "k") == 1, n
            assert cf.mexists(n, "k", "nope") == [1, 0], n
            assert r.type(n) == b"MBbloomCF", n
        assert r.exists(*names) == len(names)
        assert r.keys("users:*") == [b"users:seen"]
        assert sorted(r.keys("a/*")) == [b"a/b"]
        assert r.keys("my?filter") == [b"my filter"]
        assert set(r.scan_iter(match="../*")) == {b"../../etc/passwd"}
        assert r.keys("caf\u00e9:*") == ["caf\u00e9:\u20ac".encode()]

    @check
    def redis_names_bad_keys_are_refused_saying_why():
        expect_error(redis.ResponseError, "filter name is 513 bytes; at most 512 are allowed",
                     cf.add, "n" * 513, "k")
        expect_error(redis.ResponseError, "is not valid UTF-8 (byte 0xff at offset 3)",
                     cf.add, b"bad\xff", "k")
        expect_error(redis.ResponseError, "has a NUL byte at offset 1", cf.add, b"a\x00b", "k")
        # The existence reads answer such keys as RedisBloom answers a missing key.
        assert cf.exists(b"bad\xff", "k") == 0
        assert cf.mexists(b"bad\xff", "k", "l") == [0, 0]
        assert cf.count(b"bad\xff", "k") == 0
        assert r.exists(b"bad\xff") == 0
        assert r.type(b"bad\xff") == b"none"

    @check
    def redis_names_drop_path_like_names():
        assert r.delete("a/b", "../../etc/passwd") == 2
        assert r.exists("a/b", "../../etc/passwd") == 0
        assert r.exists("users:seen") == 1


def expiry_checks(args):
    """Redis 7's key expiry (EXPIRE family, TTL, PERSIST) over filters, as redis-py sends it."""
    r = client(args)
    cf = r.cf()

    def now_ms():
        return int(time.time() * 1000)

    @check
    def expiry_daily_dedup_filter_with_a_ttl():
        assert cf.create("seen:2026-11-29", 1000) is True
        assert cf.add("seen:2026-11-29", "evt-1") == 1
        assert r.ttl("seen:2026-11-29") == -1
        assert r.pttl("seen:2026-11-29") == -1
        assert r.execute_command("EXPIRETIME", "seen:2026-11-29") == -1
        assert r.expire("seen:2026-11-29", 172800) is True
        assert 172799 <= r.ttl("seen:2026-11-29") <= 172800
        assert 172798000 < r.pttl("seen:2026-11-29") <= 172800000
        t = r.execute_command("EXPIRETIME", "seen:2026-11-29")
        assert abs(t - (int(time.time()) + 172800)) <= 2, t
        pt = r.execute_command("PEXPIRETIME", "seen:2026-11-29")
        assert abs(pt - (now_ms() + 172800000)) <= 2000, pt
        assert cf.exists("seen:2026-11-29", "evt-1") == 1
        assert r.persist("seen:2026-11-29") is True
        assert r.persist("seen:2026-11-29") is False
        assert r.ttl("seen:2026-11-29") == -1
        # Missing keys: -2 and 0, as Redis.
        assert r.ttl("nope") == -2 and r.pttl("nope") == -2
        assert r.execute_command("EXPIRETIME", "nope") == -2
        assert r.expire("nope", 10) is False
        assert r.persist("nope") is False

    @check
    def expiry_the_filter_is_gone_at_its_time_and_cf_add_makes_a_new_one():
        assert cf.create("short", 1000) is True
        assert cf.add("short", "a") == 1
        assert r.pexpire("short", 300) is True
        assert cf.exists("short", "a") == 1
        time.sleep(0.35)
        assert r.exists("short") == 0
        assert r.ttl("short") == -2
        assert cf.exists("short", "a") == 0
        assert "short" not in [k.decode() for k in r.keys("*")]
        expect_error(redis.ResponseError, "not found", cf.info, "short")
        # CF.ADD on the expired key: a new filter, as Redis's lazy expiry.
        assert cf.add("short", "b") == 1
        assert cf.exists("short", "a") == 0
        assert cf.exists("short", "b") == 1
        assert r.ttl("short") == -1

    @check
    def expiry_absolute_times_and_times_in_the_past_delete_now():
        assert cf.create("abs", 1000) is True
        at = int(time.time()) + 1000
        assert r.expireat("abs", at) is True
        assert r.execute_command("EXPIRETIME", "abs") == at
        assert r.pexpireat("abs", at * 1000 + 5) is True
        assert r.execute_command("PEXPIRETIME", "abs") == at * 1000 + 5
        assert r.expire("abs", -1) is True  # Deleted now, as Redis.
        assert r.exists("abs") == 0
        assert cf.create("abs", 1000) is True
        assert r.expireat("abs", 1) is True
        assert r.exists("abs") == 0
        assert cf.create("abs", 1000) is True
        assert r.expire("abs", 0) is True
        assert r.exists("abs") == 0

    @check
    def expiry_nx_xx_gt_lt_as_redis_7():
        assert cf.create("cond", 1000) is True
        e = lambda *opts: r.execute_command("EXPIRE", "cond", *opts)
        assert e(100, "XX") == 0
        assert e(100, "GT") == 0
        assert e(100, "NX") == 1
        assert e(200, "NX") == 0
        assert e(50, "GT") == 0
        assert e(200, "GT") == 1
        assert e(300, "LT") == 0
        assert e(150, "lt") == 1
        assert e(400, "XX") == 1
        assert e(300, "XX", "LT") == 1
        assert e(500, "XX", "GT") == 1
        assert 499 <= r.ttl("cond") <= 500
        assert r.persist("cond") is True
        assert e(300, "XX", "LT") == 0  # XX: no expiry.
        assert e(300, "LT") == 1  # LT: no expiry counts as infinitely late.

    @check
    def expiry_bad_arguments_get_redis_error_texts():
        assert cf.create("args", 1000) is True
        expect_error(redis.ResponseError, "value is not an integer or out of range",
                     r.expire, "args", "soon")
        expect_error(redis.ResponseError, "value is not an integer or out of range",
                     r.execute_command, "EXPIRE", "args", "99999999999999999999")
        expect_error(redis.ResponseError, "invalid expire time in 'expire' command",
                     r.execute_command, "EXPIRE", "args", str(2**62))
        expect_error(redis.ResponseError, "invalid expire time in 'pexpireat' command",
                     r.execute_command, "PEXPIREAT", "args", str(2**63 - 1))
        expect_error(redis.ResponseError, "NX and XX, GT or LT options at the same time are not "
                     "compatible", r.execute_command, "EXPIRE", "args", "10", "NX", "XX")
        expect_error(redis.ResponseError, "GT and LT options at the same time are not compatible",
                     r.execute_command, "EXPIRE", "args", "10", "GT", "LT")
        expect_error(redis.ResponseError, "Unsupported option", r.execute_command, "EXPIRE",
                     "args", "10", "SOON")
        expect_error(redis.ResponseError, "wrong number of arguments", r.execute_command, "TTL")
        assert r.ttl("args") == -1  # Nothing changed.

    @check
    def expiry_commands_queue_in_multi_and_pipeline():
        assert cf.create("tx", 1000) is True
        pipe = r.pipeline(transaction=True)
        pipe.expire("tx", 100)
        pipe.ttl("tx")
        pipe.persist("tx")
        pipe.ttl("tx")
        assert pipe.execute() == [True, 100, True, -1]

    @check
    def expiry_a_dump_carries_the_expiry_into_the_loaded_filter():
        assert cf.create("dumped", 1000) is True
        assert cf.add("dumped", "x") == 1
        at = int(time.time()) + 5000
        assert r.expireat("dumped", at) is True
        dumps_backup(cf, "dumped", "restored")
        assert cf.exists("restored", "x") == 1
        assert r.execute_command("EXPIRETIME", "restored") == at
        assert r.persist("restored") is True

    @check
    def expiry_is_listed_by_command_and_info_is_unchanged():
        names = set(r.command().keys())  # COMMAND, as redis-py parses it.
        for n in ["expire", "pexpire", "expireat", "pexpireat", "ttl", "pttl", "persist",
                  "expiretime", "pexpiretime"]:
            assert n in names, n
        assert cf.create("infod", 1000) is True
        before = cf.info("infod")
        assert r.expire("infod", 100) is True
        after = cf.info("infod")
        assert before.size == after.size and before.bucketNum == after.bucketNum


# ---- with --auth-tokens -----------------------------------------------------------------------


def auth_checks(args):
    @check
    def auth_with_token():
        admin = client(args, password=args.admin_token)
        assert admin.ping() is True
        assert admin.cf().create("auth.f", 1000) is True
        assert admin.cf().add("auth.f", "a") == 1
        # username + password: AUTH user token.
        named = client(args, username="someone", password=args.admin_token)
        assert named.cf().exists("auth.f", "a") == 1

    @check
    def reader_token():
        reader = client(args, password=args.reader_token)
        assert reader.cf().exists("auth.f", "a") == 1
        assert reader.cf().mexists("auth.f", "a", "b") == [1, 0]
        assert reader.dbsize() >= 1

    @check
    def permission_errors_are_noperm():
        reader = client(args, password=args.reader_token)
        e = expect_error(redis.exceptions.NoPermissionError, "", reader.cf().add, "auth.f", "b")
        assert "reader" in str(e) or "read" in str(e), str(e)
        expect_error(redis.exceptions.NoPermissionError, "", reader.cf().create, "auth.g", 10)
        expect_error(redis.exceptions.NoPermissionError, "", reader.delete, "auth.f")
        expect_error(redis.exceptions.NoPermissionError, "", reader.cf().scandump, "auth.f", 0)
        # In a pipeline, in place.
        pipe = reader.pipeline(transaction=False)
        pcf = PipelineCF(pipe)
        pcf.exists("auth.f", "a")
        pcf.add("auth.f", "c")
        pcf.exists("auth.f", "c")
        out = pipe.execute(raise_on_error=False)
        assert out[0] == 1 and out[2] == 0, out
        assert isinstance(out[1], redis.exceptions.NoPermissionError), repr(out[1])

    @check
    def expiry_needs_admin_and_ttl_needs_read():
        admin = client(args, password=args.admin_token)
        reader = client(args, password=args.reader_token)
        assert admin.cf().create("auth.exp", 1000) is True
        for cmd in (["EXPIRE", "auth.exp", "100"], ["PEXPIRE", "auth.exp", "100000"],
                    ["EXPIREAT", "auth.exp", "4000000000"], ["PERSIST", "auth.exp"]):
            e = expect_error(redis.exceptions.NoPermissionError, "", reader.execute_command, *cmd)
            assert "admin grant" in str(e), str(e)
        assert reader.ttl("auth.exp") == -1
        assert admin.expire("auth.exp", 100) is True
        assert 99 <= reader.ttl("auth.exp") <= 100
        assert reader.execute_command("PEXPIRETIME", "auth.exp") > 0

    @check
    def no_or_wrong_token():
        anon = client(args)
        expect_error(redis.exceptions.AuthenticationError, "Authentication required", anon.ping)
        expect_error(redis.exceptions.AuthenticationError, "", anon.cf().exists, "auth.f", "a")
        wrong = client(args, password="ck_not_a_real_token")
        try:
            wrong.ping()
        except (redis.exceptions.ResponseError, redis.exceptions.AuthenticationError) as e:
            assert "WRONGPASS" in str(e) or "invalid" in str(e).lower(), str(e)
        else:
            raise AssertionError("a wrong token was accepted")


def rename_checks(args):
    # Its own server: the filters here are renamed back and forth.
    r = client(args)
    cf = r.cf()

    @check
    def rename_moves_the_filter_with_its_items():
        assert cf.create("seen:today", 1000) is True
        assert cf.add("seen:today", "u1") == 1
        assert r.rename("seen:today", "seen:yesterday") is True
        assert r.exists("seen:today") == 0
        assert r.exists("seen:yesterday") == 1
        assert cf.exists("seen:yesterday", "u1") == 1
        assert cf.info("seen:yesterday").size > 0
        # The old name is free: rotation code creates it again.
        assert cf.add("seen:today", "u2") == 1
        assert cf.exists("seen:today", "u1") == 0

    @check
    def rename_replaces_the_destination():
        assert cf.create("rot.a", 1000) is True
        assert cf.create("rot.b", 1000) is True
        assert cf.add("rot.a", "from-a") == 1
        assert cf.add("rot.b", "from-b") == 1
        assert r.rename("rot.a", "rot.b") is True
        assert r.exists("rot.a") == 0
        assert cf.exists("rot.b", "from-a") == 1
        assert cf.exists("rot.b", "from-b") == 0  # The old rot.b is gone.

    @check
    def rename_errors_as_redis():
        expect_error(redis.exceptions.ResponseError, "no such key", r.rename, "rot.missing", "x")
        # A name that cannot be a filter's cannot exist either.
        expect_error(redis.exceptions.ResponseError, "no such key", r.rename, "k" * 600, "x")
        assert cf.create("rot.c", 100) is True
        e = expect_error(redis.exceptions.ResponseError, "invalid filter name", r.rename, "rot.c",
                         "n" * 600)
        assert "512" in str(e), str(e)
        assert r.exists("rot.c") == 1  # Nothing changed.
        # RENAME k k: OK, nothing changes.
        assert r.rename("rot.c", "rot.c") is True
        assert r.exists("rot.c") == 1
        expect_error(redis.exceptions.ResponseError, "wrong number of arguments",
                     r.execute_command, "RENAME", "rot.c")

    @check
    def rename_keeps_the_ttl_and_an_expired_destination_is_free():
        # As Redis: the TTL moves with the key.
        assert cf.create("ttl.a", 1000) is True
        assert r.pexpire("ttl.a", 60000) is True
        assert r.rename("ttl.a", "ttl.b") is True
        assert 0 < r.pttl("ttl.b") <= 60000
        assert r.ttl("ttl.a") == -2
        # A destination past its expiry does not exist: RENAMENX takes it
        # (whether the server's timer has dropped it yet or not).
        assert cf.create("ttl.c", 1000) is True
        assert cf.add("ttl.c", "from-c") == 1
        assert cf.create("ttl.d", 1000) is True
        assert r.pexpire("ttl.d", 1) is True
        time.sleep(0.005)
        assert r.renamenx("ttl.c", "ttl.d") is True
        assert cf.exists("ttl.d", "from-c") == 1
        assert r.ttl("ttl.d") == -1  # ttl.c had none.

    @check
    def renamenx_only_to_a_free_name():
        assert cf.create("nx.a", 1000) is True
        assert cf.create("nx.b", 1000) is True
        assert cf.add("nx.a", "a") == 1
        assert r.renamenx("nx.a", "nx.b") is False
        assert cf.exists("nx.a", "a") == 1 and cf.exists("nx.b", "a") == 0
        assert r.renamenx("nx.a", "nx.c") is True
        assert r.exists("nx.a") == 0 and cf.exists("nx.c", "a") == 1
        assert r.renamenx("nx.c", "nx.c") is False  # Redis: the destination exists.
        expect_error(redis.exceptions.ResponseError, "no such key", r.renamenx, "nx.a", "nx.d")

    @check
    def rename_in_a_pipeline_and_a_transaction():
        assert cf.create("tx.a", 1000) is True
        assert cf.add("tx.a", "x") == 1
        pipe = r.pipeline()  # MULTI ... EXEC
        pcf = PipelineCF(pipe)
        pipe.rename("tx.a", "tx.b")
        pcf.exists("tx.b", "x")
        pcf.exists("tx.a", "x")
        pipe.renamenx("tx.b", "tx.a")
        pipe.rename("tx.missing", "tx.z")
        out = pipe.execute(raise_on_error=False)
        assert out[:4] == [True, 1, 0, True], out
        assert isinstance(out[4], redis.exceptions.ResponseError), repr(out[4])
        assert "no such key" in str(out[4]), str(out[4])
        assert cf.exists("tx.a", "x") == 1

    @check
    def rename_rotation_while_writing():
        # Writers on the current name while a rotation renames it away: every
        # acknowledged add is in whichever filter it went to, and the rotated
        # one keeps its items.
        assert cf.create("live", 100000) is True
        acknowledged = []
        stop = threading.Event()

        def writer():
            w = client(args).cf()
            i = 0
            while not stop.is_set():
                item = f"w{i}"
                try:
                    w.add("live", item)
                    acknowledged.append(item)
                except redis.exceptions.ResponseError:
                    pass
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        for gen in range(5):
            time.sleep(0.05)
            r.rename("live", f"live.gen{gen}")
        stop.set()
        t.join()
        gens = [f"live.gen{g}" for g in range(5)] + (["live"] if r.exists("live") else [])
        for item in acknowledged:
            assert any(cf.exists(g, item) == 1 for g in gens), item
        assert len(acknowledged) > 0

    @check
    def rename_command_metadata():
        # redis-py parses COMMAND's reply into a dict by name.
        info = r.execute_command("COMMAND", "INFO", "rename", "renamenx")
        for name, flags in (("rename", ["write"]), ("renamenx", ["write", "fast"])):
            c = info[name]
            assert c["arity"] == 3 and c["flags"] == flags, c
            assert (c["first_key_pos"], c["last_key_pos"], c["step_count"]) == (1, 2, 1), c


def rename_restarted_checks(args):
    r = client(args)
    cf = r.cf()

    @check
    def renames_survive_a_restart():
        assert r.exists("seen:today", "seen:yesterday", "rot.b", "nx.c", "tx.a") == 5
        assert r.exists("rot.a", "nx.a", "tx.b") == 0
        assert cf.exists("seen:yesterday", "u1") == 1
        assert cf.exists("seen:today", "u2") == 1
        assert cf.exists("rot.b", "from-a") == 1 and cf.exists("rot.b", "from-b") == 0
        assert cf.exists("nx.b", "a") == 0 and cf.exists("nx.c", "a") == 1
        assert cf.exists("tx.a", "x") == 1


def rename_auth_checks(args):
    @check
    def rename_needs_admin_on_both_names():
        admin = client(args, password=args.admin_token)
        scoped = client(args, password=args.scoped_token)
        assert admin.cf().create("rot:a", 100) is True
        assert admin.cf().create("other:b", 100) is True
        # admin:rot:* only: both names must be under it.
        e = expect_error(redis.exceptions.NoPermissionError, "other:x", scoped.rename, "rot:a",
                         "other:x")
        assert "admin" in str(e), str(e)
        expect_error(redis.exceptions.NoPermissionError, "other:b", scoped.rename, "other:b",
                     "rot:z")
        assert admin.exists("rot:a", "other:b") == 2 and admin.exists("other:x", "rot:z") == 0
        assert scoped.rename("rot:a", "rot:b") is True
        assert admin.exists("rot:a") == 0 and admin.exists("rot:b") == 1
        # Queued in MULTI, refused at queue time.
        pipe = scoped.pipeline()
        pipe.rename("rot:b", "other:y")
        # The queue-time NOPERM aborts EXEC (redis-py raises the first error).
        expect_error(redis.exceptions.ResponseError, "other:y", pipe.execute)
        assert admin.exists("rot:b") == 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--admin-token")
    p.add_argument("--reader-token")
    p.add_argument("--error-checks", action="store_true")
    p.add_argument("--bloom-fidelity", action="store_true")
    p.add_argument("--dumps-checks", action="store_true")
    p.add_argument("--multi-checks", action="store_true")
    p.add_argument("--expiry-checks", action="store_true")
    p.add_argument("--rename-checks", action="store_true")
    p.add_argument("--rename-restarted-checks", action="store_true")
    p.add_argument("--scoped-token")
    args = p.parse_args()
    if args.expiry_checks:
        expiry_checks(args)
    elif args.rename_checks:
        rename_checks(args)
    elif args.rename_restarted_checks:
        rename_restarted_checks(args)
    elif args.scoped_token:
        rename_auth_checks(args)
    elif args.multi_checks:
        multi_checks(args)
    elif args.error_checks:
        error_checks(args)
    elif args.dumps_checks:
        dumps_checks(args)
    elif args.admin_token:
        auth_checks(args)
    elif args.bloom_fidelity:
        bloom_fidelity_checks(args)
    else:
        basic_checks(args)
        redis_names_checks(args)
    failed = 0
    for fn in CHECKS:
        try:
            fn()
            print(f"ok {fn.__name__}", flush=True)
        except Exception:  # noqa: BLE001
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc(file=sys.stdout)
    if failed:
        print(f"{failed} of {len(CHECKS)} checks FAILED")
        return 1
    print(f"{len(CHECKS)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
