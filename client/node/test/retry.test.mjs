// A write whose answer is lost is retried with the same request id, and the
// server applies it once. A TCP proxy between client and cuckood lets the
// first call's request through and withholds its answer until the server has
// finished the call (its trailers, an HTTP/2 HEADERS frame with END_STREAM),
// then breaks the connection: the client sees UNAVAILABLE for an insert that
// was applied, and tries again through a new connection that the proxy
// passes through.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";

import { Client } from "../dist/esm/index.mjs";
import { startServer } from "./server.mjs";

const HEADERS = 0x1;
const END_STREAM = 0x1;

/** Proxies to `upstream` ("host:port"); the first connection loses its first answer. */
function lossyProxy(upstream) {
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(":")), Number(upstream.slice(upstream.lastIndexOf(":") + 1))];
  const stats = { connections: 0, cut: 0 };
  const server = net.createServer((client) => {
    const first = stats.connections++ === 0;
    const target = net.connect(port, host);
    client.on("error", () => target.destroy());
    target.on("error", () => client.destroy());
    client.on("close", () => target.destroy());
    target.on("close", () => client.destroy());
    client.pipe(target);
    if (!first) {
      target.pipe(client);
      return;
    }
    // The server's side of the first connection, frame by frame: frames of
    // stream 0 (settings, pings) pass; from the first frame of a call on,
    // nothing passes, and the call's END_STREAM breaks the connection.
    let buffered = Buffer.alloc(0);
    let holding = false;
    target.on("data", (data) => {
      buffered = Buffer.concat([buffered, data]);
      while (buffered.length >= 9) {
        const length = buffered.readUIntBE(0, 3);
        if (buffered.length < 9 + length) break;
        const type = buffered[3];
        const flags = buffered[4];
        const stream = buffered.readUInt32BE(5) & 0x7fffffff;
        const frame = buffered.subarray(0, 9 + length);
        buffered = buffered.subarray(9 + length);
        if (stream !== 0) holding = true;
        if (!holding) {
          client.write(frame);
        } else if (stream !== 0 && type === HEADERS && (flags & END_STREAM)) {
          stats.cut++;
          client.destroy();
          target.destroy();
          return;
        }
      }
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () =>
    resolve({ address: `127.0.0.1:${server.address().port}`, stats, close: () => server.close() })));
}

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

// Retried by grpc-js (the service config's retry policy resends the buffered
// request), and, with grpc-js's retries off, by the client's own loop.
for (const [name, channelOptions] of [["grpc-js's retry policy", {}], ["the client's loop", { "grpc.enable_retries": 0 }]]) {
  test(`an insert whose answer was lost is applied once (${name})`, async () => {
    const proxy = await lossyProxy(server.address);
    const filter = `retried-${channelOptions["grpc.enable_retries"] ?? 1}`;
    const direct = new Client({ target: server.address, token: "" });
    await direct.createFilter(filter, { capacity: 1000 });
    // Batch limits given, so the insert is the proxied connection's first call.
    const client = new Client({
      target: proxy.address, token: "", maxBatchKeys: 1000, maxBatchBytes: 1 << 20, channelOptions,
    });
    try {
      const results = await client.insert(filter, ["once-a", "once-b"]);
      assert.equal(proxy.stats.cut, 1, "the proxy broke the first answer");
      assert.ok(proxy.stats.connections >= 2, "the client connected again");
      // The repeat got the first attempt's answer ...
      assert.deepEqual([...results], ["INSERTED", "INSERTED"]);
      // ... and the keys are in the filter once, not twice.
      assert.deepEqual([...await direct.count(filter, ["once-a", "once-b"])], [1, 1]);
      assert.equal((await direct.getFilter(filter)).items, 2);
    } finally {
      client.close();
      direct.close();
      proxy.close();
    }
  });
}
