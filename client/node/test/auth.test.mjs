// Token authentication (cuckood --auth-tokens, docs/SECURITY.md) and TLS
// with a client certificate (certificates made here with openssl).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, Status } from "../dist/esm/index.mjs";
import { startServer, tempDir } from "./server.mjs";

const ADMIN = "ck_node-test-admin-token-0123456789abcdef";
const READER = "ck_node-test-reader-token-0123456789abcdef";
const sha256 = (s) => createHash("sha256").update(s).digest("hex");

describe("token authentication", () => {
  let server;
  let dir;
  before(async () => {
    dir = tempDir();
    const file = join(dir, "access");
    writeFileSync(file, `# KIND NAME CREDENTIAL GRANT...
token admin  sha256:${sha256(ADMIN)}  admin:*
token reader sha256:${sha256(READER)} read:*
`);
    server = await startServer({ args: [`--auth-tokens=${file}`] });
    const admin = new Client({ target: server.address, token: ADMIN });
    await admin.createFilter("secured", { capacity: 1000 });
    await admin.insert("secured", ["k"]);
    admin.close();
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("no token or a wrong one: UNAUTHENTICATED", async () => {
    for (const token of ["", "ck_not-a-token-of-this-server-at-all"]) {
      const c = new Client({ target: server.address, token, retryTimeoutMs: 0 });
      await assert.rejects(c.lookup("secured", ["k"], {}), (e) => e.code === Status.UNAUTHENTICATED);
      c.close();
    }
  });

  test("a read grant reads and may not write", async () => {
    const c = new Client({ target: server.address, token: READER });
    try {
      assert.deepEqual([...await c.lookup("secured", ["k", "absent"])], [true, false]);
      await assert.rejects(c.insert("secured", ["x"]), (e) => e.code === Status.PERMISSION_DENIED);
    } finally {
      c.close();
    }
  });

  test("the token defaults to $CUCKOO_TOKEN", async () => {
    const saved = process.env.CUCKOO_TOKEN;
    process.env.CUCKOO_TOKEN = READER;
    try {
      const c = new Client({ target: server.address });
      assert.deepEqual([...await c.count("secured", ["k"])], [1]);
      c.close();
    } finally {
      if (saved === undefined) delete process.env.CUCKOO_TOKEN;
      else process.env.CUCKOO_TOKEN = saved;
    }
  });
});

describe("mutual TLS", () => {
  let server;
  let certs;
  before(async () => {
    certs = tempDir("cuckoo-node-tls-");
    const sh = (...args) => execFileSync("openssl", args, { cwd: certs, stdio: "pipe" });
    sh("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
      "-subj", "/CN=node-test-ca", "-keyout", "ca.key", "-out", "ca.pem");
    for (const [name, ext] of [["server", "subjectAltName=DNS:cuckood.test,IP:127.0.0.1"],
      ["client", "extendedKeyUsage=clientAuth"]]) {
      sh("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", `/CN=${name}`, "-keyout", `${name}.key`, "-out", `${name}.csr`);
      writeFileSync(join(certs, `${name}.ext`), `${ext}\n`);
      sh("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "1", "-extfile", `${name}.ext`, "-out", `${name}.pem`);
    }
    server = await startServer({
      args: [`--tls-cert=${join(certs, "server.pem")}`, `--tls-key=${join(certs, "server.key")}`,
        `--tls-client-ca=${join(certs, "ca.pem")}`],
    });
  });
  after(async () => {
    await server?.stop();
    rmSync(certs, { recursive: true, force: true });
  });

  test("with the CA and a client certificate", async () => {
    const c = new Client({
      target: server.address, ca: join(certs, "ca.pem"), cert: join(certs, "client.pem"),
      key: join(certs, "client.key"), serverName: "cuckood.test", token: "",
    });
    try {
      await c.createFilter("over-tls", { capacity: 1000 });
      assert.deepEqual([...await c.insert("over-tls", ["t"])], ["INSERTED"]);
    } finally {
      c.close();
    }
  });

  test("without a client certificate, or in plaintext: refused", async () => {
    const noCert = new Client({ target: server.address, ca: join(certs, "ca.pem"), serverName: "cuckood.test",
      token: "", retryTimeoutMs: 0 });
    await assert.rejects(noCert.getServerInfo(), (e) => e.code === Status.UNAVAILABLE);
    noCert.close();
    const plain = new Client({ target: server.address, token: "", retryTimeoutMs: 0 });
    await assert.rejects(plain.getServerInfo(), (e) => e.code === Status.UNAVAILABLE);
    plain.close();
  });
});
