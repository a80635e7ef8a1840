// End-to-end checks of cuckood's Redis port with node-redis, a client nobody here wrote: npm's
// `redis` 6 (RESP2 and RESP3) and `redis` 4 (RESP2; installed as `redis4`), through their own
// RedisBloom command builders (client.cf.*), exactly what applications written against
// RedisBloom send.
//
// Run by tests/e2e/node_redis_test.cc, which starts the server:
//
//     node tests/e2e/node_redis/check.mjs --port 6379 [--only name,name] [--tls-ca ca.pem]
//         # a server started with --redis-listen=127.0.0.1:6379 (and --tls-cert: TLS)
//
// The packages are the ones package-lock.json pins, installed by `npm ci` into node_modules/
// beside this file (scripts/test.sh does it; tests/e2e/node_redis/install.sh by hand).
// Prints "ok <check> (<client>)" or "FAIL <check> (<client>): <error>" per check and client,
// then "<n> checks passed" (exit 0) or "<k> of <n> checks FAILED" (exit 1).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { createClient, RESP_TYPES } from 'redis';
import { createClient as createClient4, commandOptions } from 'redis4';

const { values: args } = parseArgs({
  options: { port: { type: 'string' }, only: { type: 'string' }, 'tls-ca': { type: 'string' } },
});
if (!args.port) {
  console.error('usage: check.mjs --port N [--only check,check] [--tls-ca CA.pem]');
  process.exit(2);
}
const only = args.only ? new Set(args.only.split(',')) : null;
// --tls-ca: the port serves TLS; the server's certificate is checked against this CA (for
// localhost), as an application would.
const tls = args['tls-ca']
  ? { tls: true, ca: readFileSync(args['tls-ca']), servername: 'localhost' }
  : {};
const url = `${args['tls-ca'] ? 'rediss' : 'redis'}://127.0.0.1:${args.port}`;

// The clients: each check runs once per client, on keys of its own (prefix).
const clients = [
  {
    label: 'redis 6, RESP2',
    prefix: 'n6r2',
    open: () => createClient({ url, RESP: 2, socket: tls }),
    buffers: (c) => c.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer }),
  },
  {
    label: 'redis 6, RESP3',
    prefix: 'n6r3',
    open: () => createClient({ url, RESP: 3, socket: tls }),
    buffers: (c) => c.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer }),
  },
  {
    label: 'redis 4, RESP2',
    prefix: 'n4',
    v4: true,
    open: () => createClient4({ url, socket: tls }),
    buffers: null,  // commandOptions({ returnBuffers: true }) per call
  },
];

// A rejected promise's error, or a failure if it resolved.
async function rejection(promise) {
  try {
    const value = await promise;
    assert.fail(`expected an error, got ${JSON.stringify(value)}`);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    return e;
  }
}

// CF.MEXISTS's answers as booleans (node-redis 4 has no cf.mExists: sent as is there).
async function mexists(k, c, key, items) {
  if (k.v4) return (await c.sendCommand(['CF.MEXISTS', key, ...items])).map((x) => x === 1);
  return c.cf.mExists(key, items);
}

// [iterator, chunk] of CF.SCANDUMP with the chunk as a Buffer (binary), for either client.
async function scandump(k, c, key, iterator) {
  if (k.v4) {
    const r = await c.cf.scanDump(commandOptions({ returnBuffers: true }), key, iterator);
    return [Number(r.iterator), r.chunk];
  }
  const r = await k.buffers(c).cf.scanDump(key, iterator);
  return [Number(r.iterator), r.chunk];
}

const checks = [];
function check(name, fn) {
  checks.push({ name, fn });
}

// ---- what RedisBloom clients do every day -------------------------------------------------------

check('connection', async (k, c) => {
  assert.equal(await c.ping(), 'PONG');
  assert.equal(await c.sendCommand(['ECHO', 'hi']), 'hi');
  assert.equal(await c.sendCommand(['SELECT', '0']), 'OK');
  const e = await rejection(c.sendCommand(['SELECT', '1']));
  assert.match(e.message, /DB index is out of range/);
});

check('reserve_add_exists', async (k, c) => {
  const f = `${k.prefix}.f`;
  assert.equal(await c.cf.reserve(f, 1000), 'OK');
  const e = await rejection(c.cf.reserve(f, 1000));
  assert.match(e.message, /item exists/);
  assert.equal(await c.cf.add(f, 'user:42'), true);
  assert.equal(await c.cf.addNX(f, 'user:42'), false);
  assert.equal(await c.cf.addNX(f, 'user:43'), true);
  assert.equal(await c.cf.exists(f, 'user:42'), true);
  assert.equal(await c.cf.exists(f, 'user:44'), false);
  assert.deepEqual(await mexists(k, c, f, ['user:42', 'user:44', 'user:43']), [true, false, true]);
  assert.equal(await c.cf.count(f, 'user:42'), 1);
  assert.equal(await c.cf.del(f, 'user:42'), true);
  assert.equal(await c.cf.exists(f, 'user:42'), false);
  // A missing key: absent, as RedisBloom answers.
  assert.equal(await c.cf.exists(`${k.prefix}.missing`, 'x'), false);
  assert.equal(await c.cf.count(`${k.prefix}.missing`, 'x'), 0);
});

check('insert_options', async (k, c) => {
  const f = `${k.prefix}.ins`;
  assert.deepEqual(await c.cf.insert(f, ['a', 'b'], { CAPACITY: 5000 }), [true, true]);
  const info = await c.cf.info(f);
  assert.ok(info, 'CF.INFO answered nothing');
  // CF.INSERTNX answers integers in RESP2 and RESP3 (-1: full).
  assert.deepEqual((await c.cf.insertNX(f, ['a', 'c'])).map(Number), [0, 1]);
  const e = await rejection(c.cf.insert(`${k.prefix}.nocreate`, ['a'], { NOCREATE: true }));
  assert.match(e.message, /not found/i);
  assert.equal(await c.exists(`${k.prefix}.nocreate`), 0);
  assert.equal(await c.cf.reserve(`${k.prefix}.opts`, 1000, { BUCKETSIZE: 4, MAXITERATIONS: 50, EXPANSION: 4 }),
               'OK');
});

check('binary_items', async (k, c) => {
  const f = `${k.prefix}.bin`;
  const items = [Buffer.from([0, 1, 2, 255]), Buffer.from([0xff, 0xfe, 0x00]), Buffer.from('\r\n*1\r\n')];
  for (const item of items) assert.equal(await c.cf.add(f, item), true);
  for (const item of items) assert.equal(await c.cf.exists(f, item), true);
  assert.equal(await c.cf.exists(f, Buffer.from([0, 1, 2, 254])), false);
});

check('info', async (k, c) => {
  const f = `${k.prefix}.info`;
  await c.cf.reserve(f, 1000, { BUCKETSIZE: 4 });
  await c.cf.add(f, 'x');
  const info = await c.cf.info(f);
  // node-redis maps RedisBloom's field names; RESP2 and RESP3 give the same object.
  // (node-redis 4 renames them.)
  const get = (...names) => info[names.find((n) => info[n] !== undefined)];
  const text = JSON.stringify(info);
  assert.equal(Number(get('Number of items inserted', 'numberOfInsertedItems')), 1, text);
  assert.equal(Number(get('Bucket size', 'bucketSize')), 4, text);
  assert.ok(Number(get('Size', 'size')) > 0, text);
});

// Many commands in flight on one connection at once (node-redis pipelines whatever is sent in
// one tick): the replies come back in order, matched to their commands.
check('pipelined_thousands', async (k, c) => {
  const f = `${k.prefix}.pipe`;
  await c.cf.reserve(f, 100000);
  const n = 5000;
  const adds = await Promise.all(Array.from({ length: n }, (_, i) => c.cf.add(f, `item-${i}`)));
  assert.equal(adds.filter((x) => x === true).length, n);
  const present = await Promise.all(Array.from({ length: n }, (_, i) => c.cf.exists(f, `item-${i}`)));
  assert.equal(present.filter((x) => x === true).length, n);
  const absent = await Promise.all(Array.from({ length: 200 }, (_, i) => c.cf.exists(f, `other-${i}`)));
  assert.ok(absent.filter((x) => x === true).length <= 2, 'too many false positives at rate 0.002');
});

check('keyspace', async (k, c) => {
  const f = `${k.prefix}.ks`;
  await c.cf.reserve(f, 1000);
  assert.equal(await c.exists(f), 1);
  assert.equal(await c.type(f), 'MBbloomCF');
  const keys = await c.keys(`${k.prefix}.k*`);
  assert.deepEqual(keys, [f]);
  assert.equal(await c.del(f), 1);
  assert.equal(await c.exists(f), 0);
  assert.equal(await c.type(f), 'none');
});

// RedisBloom's documented backup loop: SCANDUMP until the iterator is 0, then LOADCHUNK each
// chunk into a new key; the copy answers as the original.
check('scandump_loadchunk_backup', async (k, c) => {
  const f = `${k.prefix}.dump`;
  const copy = `${k.prefix}.dump-copy`;
  await c.cf.reserve(f, 10000);
  for (let i = 0; i < 1000; i += 100) {
    await c.cf.insert(f, Array.from({ length: 100 }, (_, j) => `d-${i + j}`));
  }
  const chunks = [];
  let it = 0;
  for (;;) {
    const [next, data] = await scandump(k, c, f, it);
    if (next === 0) break;
    assert.ok(Buffer.isBuffer(data), `chunk is ${typeof data}`);
    chunks.push([next, data]);
    it = next;
  }
  assert.ok(chunks.length >= 2, `${chunks.length} chunks`);
  for (const [i, data] of chunks) assert.equal(await c.cf.loadChunk(copy, i, data), 'OK');
  const present = await mexists(k, c, copy, Array.from({ length: 1000 }, (_, i) => `d-${i}`));
  assert.equal(present.filter((x) => x === true).length, 1000);
});

// ---- issue 33: what RedisBloom client code also does --------------------------------------------

// .multi().exec(): the commands run at EXEC, in order, and answer as one array.
check('multi_exec', async (k, c) => {
  const f = `${k.prefix}.tx`;
  const replies = await c.multi().cf.reserve(f, 1000).cf.add(f, 'a').cf.add(f, 'b').cf.exists(f, 'a').exec();
  assert.deepEqual(replies.slice(0, 1), ['OK']);
  assert.equal(replies.length, 4);
  assert.ok(replies[1] === true || replies[1] === 1, JSON.stringify(replies));
  assert.ok(replies[3] === true || replies[3] === 1, JSON.stringify(replies));
  assert.equal(await c.cf.exists(f, 'b'), true);
});

// A transaction with a command refused at queue time runs nothing (EXECABORT).
check('multi_aborts_whole', async (k, c) => {
  const f = `${k.prefix}.txabort`;
  await c.cf.reserve(f, 1000);
  const e = await rejection(
      c.multi().cf.add(f, 'queued').addCommand(['CF.ADD', f]).cf.add(f, 'queued-2').exec());
  assert.match(String(e.message) + String(e.cause ?? ''), /EXECABORT|arguments/i, e.message);
  assert.equal(await c.cf.exists(f, 'queued'), false);
  assert.equal(await c.cf.exists(f, 'queued-2'), false);
});

// Keys are Redis keys: `users:seen` and friends.
check('names_are_redis_keys', async (k, c) => {
  for (const name of [`${k.prefix}:users:seen`, `${k.prefix} my filter`, `${k.prefix}/a/b`, `${k.prefix}:é`]) {
    assert.equal(await c.cf.exists(name, 'x'), false, name);
    assert.equal(await c.cf.reserve(name, 1000), 'OK', name);
    assert.equal(await c.cf.add(name, 'x'), true, name);
    assert.equal(await c.cf.exists(name, 'x'), true, name);
    assert.equal(await c.exists(name), 1, name);
  }
  const long = `${k.prefix}:${'k'.repeat(512 - k.prefix.length - 1)}`;
  assert.equal(await c.cf.add(long, 'x'), true);
  const e = await rejection(c.cf.add(`${long}x`, 'x'));
  assert.match(e.message, /512/);
});

// The same item added again and again: every add answers 1 and CF.COUNT counts them all, as
// RedisBloom's filters do (they grow).
check('repeated_item_grows', async (k, c) => {
  const f = `${k.prefix}.seen`;
  for (let i = 0; i < 40; ++i) assert.equal(await c.cf.add(f, 'event-1'), true, `add ${i + 1}`);
  assert.equal(await c.cf.count(f, 'event-1'), 40);
});

// RedisBloom's error texts, bare (node-redis shows them as they are).
check('redisbloom_errors', async (k, c) => {
  let e = await rejection(c.cf.del(`${k.prefix}.nothere`, 'x'));
  assert.equal(e.message, 'Not found');
  e = await rejection(c.cf.reserve(`${k.prefix}.tiny`, 1));
  assert.equal(e.message, 'Capacity must be at least (BucketSize * 2)');
  // (node-redis 4's builder drops EXPANSION 0, a falsy value: sent as is.)
  await c.sendCommand(['CF.RESERVE', `${k.prefix}.fixed`, '8', 'EXPANSION', '0', 'BUCKETSIZE', '4']);
  let full = 0;
  for (let i = 0; i < 64; ++i) {
    try {
      await c.cf.add(`${k.prefix}.fixed`, `fixed-${i}`);
    } catch (err) {
      assert.equal(err.message, 'Filter is full');
      ++full;
    }
  }
  assert.ok(full > 0, 'a fixed filter of capacity 8 took 64 items');
});

// An empty filter's dump, and the end of a dump, answer as RedisBloom's: [0, nil].
check('scandump_redisbloom_replies', async (k, c) => {
  const f = `${k.prefix}.empty`;
  await c.cf.reserve(f, 1000);
  const [it, data] = await scandump(k, c, f, 0);
  assert.equal(it, 0);
  assert.equal(data, null);
});

check('module_list', async (k, c) => {
  const modules = await c.sendCommand(['MODULE', 'LIST']);
  assert.ok(JSON.stringify(modules, (key, v) => (v instanceof Map ? Object.fromEntries(v) : v)).includes('"bf"'),
            JSON.stringify(modules));
});

check('unlink_memory_usage', async (k, c) => {
  const f = `${k.prefix}.mem`;
  await c.cf.reserve(f, 100000);
  const bytes = await c.sendCommand(['MEMORY', 'USAGE', f]);
  assert.ok(Number(bytes) > 100000, String(bytes));
  assert.equal(await c.sendCommand(['MEMORY', 'USAGE', `${k.prefix}.none`]), null);
  assert.equal(await c.unlink(f), 1);
  assert.equal(await c.exists(f), 0);
});

// ---- the run ----------------------------------------------------------------------------------------

let passed = 0;
let failed = 0;
for (const k of clients) {
  const c = k.open();
  c.on('error', () => {});  // Connection errors surface as rejected commands.
  await c.connect();
  for (const { name, fn } of checks) {
    if (only && !only.has(name)) continue;
    try {
      await fn(k, c);
      console.log(`ok ${name} (${k.label})`);
      ++passed;
    } catch (e) {
      console.log(`FAIL ${name} (${k.label}): ${e.stack ?? e}`);
      ++failed;
    }
  }
  await c.quit?.() ?? c.close?.();
}
if (failed === 0) {
  console.log(`${passed} checks passed`);
} else {
  console.log(`${failed} of ${passed + failed} checks FAILED`);
  process.exit(1);
}
