// The client's calls against a real cuckood (test/server.mjs), through the
// ES module build; package.test.mjs loads both builds from the packed tarball.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, CuckooError, Status } from "../dist/esm/index.mjs";
import { startServer } from "./server.mjs";

// A small batch limit, so that a batch of 120 keys is split into 3 requests
// (the server refuses a request over it with INVALID_ARGUMENT).
const MAX_BATCH_KEYS = 50;

describe("against cuckood", () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ unix: true, args: [`--max-batch-keys=${MAX_BATCH_KEYS}`] });
    client = new Client({ target: server.address, timeoutMs: 10000, token: "" });
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("each call, as README.md's example makes it", async () => {
    const info = await client.createFilter("users", { capacity: 100000, falsePositiveRate: 0.001, ifNotExists: true });
    assert.equal(info.created, true);
    assert.equal(info.name, "users");
    assert.ok(info.capacity >= 100000);
    assert.deepEqual([...await client.insert("users", ["alice", Buffer.from("bob")])], ["INSERTED", "INSERTED"]);
    assert.deepEqual([...await client.insert("users", ["alice"], { ifAbsent: true })], ["ALREADY_PRESENT"]);
    assert.deepEqual([...await client.lookup("users", ["alice", "carol"])], [true, false]);
    assert.deepEqual([...await client.count("users", ["alice"])], [1]);
    assert.deepEqual([...await client.delete("users", ["bob", "zed"])], ["DELETED", "NOT_FOUND"]);
    assert.equal((await client.getFilter("users")).items, 1);
    assert.ok(await client.dropFilter("users") > 0);
  });

  test("createFilter: settings, ifNotExists, ALREADY_EXISTS", async () => {
    const made = await client.createFilter("settings", {
      capacity: 5000, fingerprintBits: 16, bucketSize: 4, shards: 2, seed: 12345678901234567890n,
    });
    assert.equal(made.created, true);
    assert.equal(made.fingerprintBits, 16);
    assert.equal(made.shards, 2);
    assert.equal(made.seed, 12345678901234567890n); // a 64-bit seed, exact
    assert.ok(made.logPosition > 0);
    const again = await client.createFilter("settings", {
      capacity: 5000, fingerprintBits: 16, bucketSize: 4, shards: 2, seed: 12345678901234567890n, ifNotExists: true,
    });
    assert.equal(again.created, false);
    await assert.rejects(client.createFilter("settings", { capacity: 5000 }),
      (e) => e instanceof CuckooError && e.code === Status.ALREADY_EXISTS && e.codeName === "ALREADY_EXISTS");
    const growing = await client.createFilter("growing", { capacity: 1000, growthFactor: 2, maxCapacity: 8000 });
    assert.equal(growing.growthFactor, 2);
    assert.equal(growing.maxCapacity, 8000);
    assert.equal(growing.generations.length, 1);
  });

  test("getFilter and listFilters", async () => {
    await client.createFilter("list-a", { capacity: 1000 });
    await client.createFilter("list-b", { capacity: 1000 });
    await client.insert("list-b", ["x", "y", "z"]);
    const b = await client.getFilter("list-b");
    assert.equal(b.items, 3);
    assert.ok(b.memoryBytes > 0);
    assert.equal(b.expireAt, null);
    const names = (await client.listFilters()).map((f) => f.name);
    assert.ok(names.includes("list-a") && names.includes("list-b"), names.join(","));
    assert.deepEqual(names, [...names].sort());
  });

  test("a batch over the server's limit is split, results in order", async () => {
    await client.createFilter("batches", { capacity: 10000 });
    const keys = Array.from({ length: 120 }, (_, i) => `key-${i}`);
    const inserted = await client.insert("batches", keys);
    assert.equal(inserted.length, 120);
    assert.ok(inserted.every((r) => r === "INSERTED"));
    const probe = keys.flatMap((k) => [k, `absent-${k}`]);
    const present = await client.lookup("batches", probe);
    assert.equal(present.length, 240);
    assert.ok(keys.every((_, i) => present[2 * i] === true), "every inserted key is present");
    assert.ok(present.filter((p, i) => i % 2 === 1 && p).length < 5, "absent keys are mostly absent");
    assert.equal((await client.getFilter("batches")).items, 120);
    // A raw request over the limit is what the split avoids.
    const one = new Client({ target: server.address, maxBatchKeys: 1000, maxBatchBytes: 1 << 20, token: "" });
    try {
      await assert.rejects(one.lookup("batches", keys), (e) => e.code === Status.INVALID_ARGUMENT);
    } finally {
      one.close();
    }
  });

  test("string and byte keys are the same key", async () => {
    await client.createFilter("bytes", { capacity: 1000 });
    await client.insert("bytes", ["héllo", new Uint8Array([0, 255, 1])]);
    assert.deepEqual([...await client.lookup("bytes", [Buffer.from("héllo", "utf8"), "\u0000\u00ff\u0001"])], [true, false]);
    assert.deepEqual([...await client.lookup("bytes", [new Uint8Array([0, 255, 1])])], [true]);
  });

  test("a missing filter is NOT_FOUND with a clear message", async () => {
    for (const call of [() => client.getFilter("missing"), () => client.insert("missing", ["k"]),
      () => client.lookup("missing", ["k"]), () => client.dropFilter("missing")]) {
      await assert.rejects(call(), (e) => {
        assert.ok(e instanceof CuckooError);
        assert.equal(e.code, Status.NOT_FOUND);
        assert.match(e.message, /^NOT_FOUND: .*"missing"/);
        return true;
      });
    }
  });

  test("bad arguments are refused before a call", async () => {
    await assert.rejects(client.lookup("users", "alice"), TypeError);
    await assert.rejects(client.lookup("users", [42]), /keys\[0\] is a number/);
    await assert.rejects(client.insert("users", ["a"], { requestId: "has space" }), RangeError);
    assert.throws(() => new Client({ token: "two words" }), RangeError);
    assert.throws(() => new Client({ cert: Buffer.from("x") }), /cert needs key/);
    assert.throws(() => new Client({ ca: "/nonexistent/ca.pem" }), /cannot read the ca file/);
  });

  test("server info", async () => {
    const info = await client.getServerInfo();
    assert.match(info.version, /^\d+\.\d+\.\d+/);
    assert.equal(info.maxBatchKeys, MAX_BATCH_KEYS);
    assert.equal(info.mode, "single");
    assert.equal(info.memoryBudgetBytes, 64 << 20);
    assert.equal(info.dedupWindowMs, 120000);
    assert.equal(info.cluster, null);
  });

  test("log positions: writes raise lastLogPosition", async () => {
    await client.createFilter("positions", { capacity: 1000 });
    const before = client.lastLogPosition;
    const r = await client.insert("positions", ["a"]);
    assert.ok(r.logPosition > before);
    assert.equal(client.lastLogPosition, r.logPosition);
  });

  test("a split batch that fails part way says how much was applied", async () => {
    await client.createFilter("partial", { capacity: 10000 });
    // The third request (keys 100 to 119) holds an empty key: refused whole.
    const keys = Array.from({ length: 120 }, (_, i) => (i === 110 ? "" : `p-${i}`));
    await assert.rejects(client.insert("partial", keys), (e) => {
      assert.equal(e.code, Status.INVALID_ARGUMENT);
      assert.equal(e.applied, 100);
      assert.match(e.message, /\(the first 100 of 120 keys were applied\)$/);
      return true;
    });
    assert.equal((await client.getFilter("partial")).items, 100);
  });

  test("a repeated requestId is applied once", async () => {
    await client.createFilter("dedup", { capacity: 1000 });
    const first = await client.insert("dedup", ["d"], { requestId: "client-test-dedup" });
    const again = await client.insert("dedup", ["d"], { requestId: "client-test-dedup" });
    assert.deepEqual([...again], [...first]);
    assert.equal(again.logPosition, first.logPosition);
    assert.deepEqual([...await client.count("dedup", ["d"])], [1]);
    await client.delete("dedup", ["d"], { requestId: "client-test-dedup-delete" });
    await client.delete("dedup", ["d"], { requestId: "client-test-dedup-delete" });
    assert.deepEqual([...await client.count("dedup", ["d"])], [0]);
  });

  test("readYourWrites sends the last log position", async () => {
    const reader = new Client({ target: server.address, token: "" });
    const blind = new Client({ target: server.address, token: "", readYourWrites: false });
    try {
      await reader.createFilter("ryw", { capacity: 1000 });
      // A position past a single node's log: OUT_OF_RANGE (not waited for).
      reader.lastLogPosition = blind.lastLogPosition = 1e12;
      await assert.rejects(reader.lookup("ryw", ["k"]), (e) => e.code === Status.OUT_OF_RANGE);
      assert.deepEqual([...await blind.lookup("ryw", ["k"])], [false]);
    } finally {
      reader.close();
      blind.close();
    }
  });

  test("a Unix socket target", async () => {
    const unix = new Client({ target: `unix://${server.socket}`, token: "" });
    try {
      await unix.createFilter("over-unix", { capacity: 1000 });
      await unix.insert("over-unix", ["u"]);
      assert.deepEqual([...await client.lookup("over-unix", ["u", "v"])], [true, false]);
    } finally {
      unix.close();
    }
  });

  test("a deadline: DEADLINE_EXCEEDED", async () => {
    // 1 ms is shorter than any round trip, and not retried.
    await assert.rejects(client.getServerInfo({ timeoutMs: 0.001 }), (e) => e.code === Status.DEADLINE_EXCEEDED);
  });
});

test("an unreachable server: UNAVAILABLE, retried for retryTimeoutMs", async () => {
  // Port 1 on loopback: nothing listens there (unless root runs a service on
  // it). grpc-js's own retries off, so every attempt is one refused connect
  // and the client's loop makes them.
  const channelOptions = { "grpc.enable_retries": 0 };
  const quick = new Client({ target: "127.0.0.1:1", retryTimeoutMs: 0, token: "", channelOptions });
  await assert.rejects(quick.getServerInfo(), (e) => e.code === Status.UNAVAILABLE && !/attempts/.test(e.message));
  quick.close();
  const patient = new Client({ target: "127.0.0.1:1", retryTimeoutMs: 1500, token: "", channelOptions });
  const start = Date.now();
  await assert.rejects(patient.getServerInfo(), (e) => {
    assert.equal(e.code, Status.UNAVAILABLE);
    const attempts = /after (\d+) attempts/.exec(e.message);
    assert.ok(attempts && Number(attempts[1]) >= 3, e.message);
    return true;
  });
  assert.ok(Date.now() - start >= 1500, `gave up after ${Date.now() - start} ms`);
  patient.close();
});
