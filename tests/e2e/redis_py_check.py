#!/usr/bin/python3
"""End-to-end checks of cuckood's Redis port with redis-py (Debian's python3-redis 4.3).

Run by tests/e2e/redis_py_test.cc, which starts the server:

    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379
        # a server started with --redis-listen=127.0.0.1:6379 --redis-error-rate=1e-7
    /usr/bin/python3 tests/e2e/redis_py_check.py --port 6379 --admin-token T --reader-token T
        # a server started with --auth-tokens (tokens with admin:* and read:*)

Uses redis-py's own RedisBloom command builders (r.cf(): CF.RESERVE, CF.ADD, ...), so the
arguments are exactly what applications written against RedisBloom send. redis-py 4.3 speaks
RESP2 only. Prints "ok <check>" or "FAIL <check>" and a traceback per check, then
"<n> checks passed" (exit 0) or "<k> of <n> checks FAILED" (exit 1).
"""

import argparse
import sys
import threading
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
        # cuckood ends a dump with (0, b"") (docs/REDIS_COMPATIBILITY.md);
        # RedisBloom with (0, None). Loops that test the iterator, as
        # RedisBloom's documented one does, work with both.
        assert cf.create("py.small", 100) is True
        assert cf.add("py.small", "x") == 1
        iter, data = cf.scandump("py.small", 0)
        while iter != 0:
            iter, data = cf.scandump("py.small", iter)
        assert data == b"", f"the last reply's data is {data!r}"


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--admin-token")
    p.add_argument("--reader-token")
    p.add_argument("--error-checks", action="store_true")
    args = p.parse_args()
    if args.error_checks:
        error_checks(args)
    elif args.admin_token:
        auth_checks(args)
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
