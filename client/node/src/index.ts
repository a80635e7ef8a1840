// @cuckood/client: a Node.js client for cuckood (cuckoo.v1.FilterService).
//
// A thin layer over @grpc/grpc-js with the service loaded at run time by
// @grpc/proto-loader from the proto this package ships (proto/, a copy of
// the repository's proto/cuckoo/v1/filter_service.proto). What it adds, as
// the Python client (client/python) does:
//   - a deadline on every call (timeoutMs);
//   - one error type, CuckooError, with the gRPC status code and the
//     server's message ("NOT_FOUND: filter \"x\" not found");
//   - keys as strings (sent as UTF-8) or bytes (Uint8Array / Buffer);
//   - batches of any size, split to the server's limits (asked once with
//     GetServerInfo), results put back together in input order;
//   - retries of UNAVAILABLE (and RESOURCE_EXHAUSTED from the transport)
//     with exponential backoff for up to retryTimeoutMs, Insert and Delete
//     always with a request id (the caller's or a random one) that every
//     retry repeats, so the server applies the write once;
//   - read-your-writes: every call carries the largest log position seen;
//   - a bearer token (--auth-tokens), TLS with a CA and a client
//     certificate, and Unix socket targets (unix:///path).
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

/** gRPC status codes (grpc-js's `status`), to compare with {@link CuckooError.code}. */
export const Status = grpc.status;

/** A key: a string (sent as its UTF-8 bytes) or bytes. */
export type Key = string | Uint8Array;

/** The server a {@link Client} talks to when given no target. */
export const DEFAULT_TARGET = "localhost:50051";

/** The package's copy of the proto, which the client loads. */
export const PROTO_PATH = join(__dirname, "..", "..", "proto", "cuckoo", "v1", "filter_service.proto");

/** What an insert did with one key (cuckoo.v1.InsertResult without its prefix). */
export type InsertResult = "INSERTED" | "ALREADY_PRESENT" | "FULL" | "UNSPECIFIED";
/** What a delete did with one key (cuckoo.v1.DeleteResult without its prefix). */
export type DeleteResult = "DELETED" | "NOT_FOUND" | "UNSPECIFIED";

/**
 * The per-key results of a call, in the order of its keys: an array with the
 * call's log position (the largest of its responses', when a batch was sent
 * as several requests).
 */
export type Results<T> = T[] & { logPosition: number };

/** One table generation of a growing filter (cuckoo.v1.FilterInfo.Generation). */
export interface Generation {
  fingerprintBits: number;
  shards: number;
  slots: number;
  items: number;
  memoryBytes: number;
  falsePositiveBound: number;
}

/**
 * A filter's settings and state (cuckoo.v1.FilterInfo; the fields are the
 * proto's, in camelCase, documented there). 64-bit counts are numbers;
 * `seed`, any 64-bit value, is a bigint.
 */
export interface FilterInfo {
  name: string;
  capacity: number;
  fingerprintBits: number;
  bucketSize: number;
  shards: number;
  maxKicks: number;
  seed: bigint;
  hashId: number;
  bucketsPerShard: number;
  slots: number;
  semiSort: boolean;
  items: number;
  loadFactor: number;
  memoryBytes: number;
  bitsPerItem: number;
  expectedFalsePositiveRate: number;
  falsePositiveRateAtCapacity: number;
  lastSnapshotTime: Date | null;
  lastSnapshotBytes: number;
  unsnapshottedChanges: number;
  hasUnsnapshottedChanges: boolean;
  growthFactor: number;
  maxCapacity: number;
  falsePositiveRate: number;
  falsePositiveBound: number;
  reachableCapacity: number;
  maxGenerations: number;
  generations: Generation[];
  growOnRepeats: boolean;
  /** When the server drops the filter; null: never. */
  expireAt: Date | null;
  /** createFilter only: true if the call made the filter, false if ifNotExists found it. */
  created?: boolean;
  /** The response's log position. */
  logPosition: number;
}

/** A replica's view of its cluster (cuckoo.v1.ClusterInfo), for a server run with --nats. */
export interface ClusterInfo {
  replicaId: string;
  natsStatus: string;
  natsServer: string;
  stream: string;
  streamReplicas: number;
  streamLastPosition: number;
  streamFirstPosition: number;
  lag: number;
  logIdentity: string;
  problem: string;
  logCheck: string;
}

/** The server's version, limits and log (cuckoo.v1.GetServerInfoResponse). */
export interface ServerInfo {
  version: string;
  maxBatchKeys: number;
  maxKeyBytes: number;
  maxMessageBytes: number;
  maxFilters: number;
  memoryBudgetBytes: number;
  memoryUsedBytes: number;
  filters: number;
  dataDir: string;
  durability: string;
  /** "single" or "cluster". */
  mode: string;
  appliedLogPosition: number;
  /** Repeats of an Insert/Delete request id within this many ms get the first one's results. */
  dedupWindowMs: number | null;
  /** Set for a cluster replica, null for a single node. */
  cluster: ClusterInfo | null;
}

/** Options of {@link Client}. Every one is optional. */
export interface ClientOptions {
  /**
   * "host:port", "unix:///absolute/path" (a Unix socket), or any gRPC target
   * grpc-js takes ("dns:///cuckood.ns.svc:50051", "ipv4:10.0.0.1:50051,10.0.0.2:50051";
   * calls are spread over its addresses, round_robin). Default "localhost:50051".
   */
  target?: string;
  /** Deadline of each RPC in milliseconds (each request of a split batch, each retry); null: none. Default 30000. */
  timeoutMs?: number | null;
  /**
   * How long a call failing with UNAVAILABLE (or RESOURCE_EXHAUSTED from the
   * transport) is tried again, in ms, with exponential backoff (100 ms to 2 s,
   * jittered). 0: no retries of the client's own. Default 30000. Insert and
   * Delete are retried with their request id; createFilter only with
   * ifNotExists; dropFilter never.
   */
  retryTimeoutMs?: number;
  /** Most keys per request; default the server's max_batch_keys. */
  maxBatchKeys?: number;
  /** Most key bytes per request; default a quarter of the server's max_message_bytes. */
  maxBatchBytes?: number;
  /** Send the largest log position seen as min_log_position (default true). */
  readYourWrites?: boolean;
  /**
   * Access token for a server run with --auth-tokens, sent with every call as
   * "authorization: Bearer TOKEN". Default: the environment variable
   * CUCKOO_TOKEN if set; "" for none.
   */
  token?: string;
  /** Connect with TLS, checking the server's certificate against the system's CAs or `ca`. */
  tls?: boolean;
  /** CA certificate(s) (PEM): a file path, or the contents as a Buffer. Implies tls. */
  ca?: string | Buffer;
  /** Client certificate chain (PEM) for mutual TLS, path or Buffer; needs `key`. Implies tls. */
  cert?: string | Buffer;
  /** The private key of `cert` (PEM), path or Buffer. */
  key?: string | Buffer;
  /** Name to check the server's certificate against instead of the target's host. */
  serverName?: string;
  /** Largest response accepted, in bytes (default 64 MiB). */
  maxReceiveMessageBytes?: number;
  /**
   * grpc-js channel options, over the client's own (which set the service
   * config: round_robin and grpc-js's retry of UNAVAILABLE, up to 5 attempts).
   * E.g. { "grpc.enable_retries": 0 } leaves retries to the client's loop alone.
   */
  channelOptions?: grpc.ChannelOptions;
}

/** Per-call options. */
export interface CallOptions {
  /** This call's deadline per RPC in ms, instead of the client's timeoutMs; null: none. */
  timeoutMs?: number | null;
}

/** Options of {@link Client.createFilter}; unset ones take the server's defaults (see CreateFilterRequest). */
export interface CreateFilterOptions extends CallOptions {
  /** Keys the filter must hold, 1 to 2^40. Required. */
  capacity: number;
  /** Target false-positive rate in (0, 1) (server default 0.002). */
  falsePositiveRate?: number;
  fingerprintBits?: number;
  bucketSize?: number;
  shards?: number;
  maxKicks?: number;
  seed?: bigint | number;
  /** Return an existing filter with the same settings (created: false) instead of ALREADY_EXISTS. */
  ifNotExists?: boolean;
  semiSort?: boolean;
  /** 2 to 8: a filter that grows instead of answering FULL; 0/unset: fixed. */
  growthFactor?: number;
  maxCapacity?: number;
}

/** Options of {@link Client.insert}. */
export interface InsertOptions extends CallOptions {
  /** Skip keys the filter (probably) holds already: ALREADY_PRESENT. */
  ifAbsent?: boolean;
  /**
   * 1 to 128 characters ! to ~; default a random one. A retry of the call
   * repeats it; a batch split into n requests sends `${requestId}.${i}`.
   */
  requestId?: string;
}

/** Options of {@link Client.delete}. */
export interface DeleteOptions extends CallOptions {
  /** As {@link InsertOptions.requestId}. */
  requestId?: string;
}

/**
 * A failed call: the gRPC status `code` (compare with {@link Status}), its
 * name (`codeName`), the server's message (`details`), and for a batch split
 * into several requests how many keys the ones that succeeded carried
 * (`applied`). `message` is "CODE: details".
 */
export class CuckooError extends Error {
  readonly code: grpc.status;
  readonly codeName: string;
  readonly details: string;
  readonly applied: number;

  constructor(code: grpc.status, details: string, applied = 0) {
    const codeName = grpc.status[code] ?? `STATUS_${code}`;
    super(`${codeName}: ${details}`);
    this.name = "CuckooError";
    this.code = code;
    this.codeName = codeName;
    this.details = details;
    this.applied = applied;
  }

  /** The CuckooError of an error from a grpc-js call. */
  static fromServiceError(error: unknown): CuckooError {
    if (error instanceof CuckooError) return error;
    const e = error as Partial<grpc.ServiceError>;
    if (typeof e?.code === "number") {
      return new CuckooError(e.code, e.details ?? e.message ?? "");
    }
    return new CuckooError(grpc.status.UNKNOWN, String((error as Error)?.message ?? error));
  }
}

// The channel's service config, as the Python client's: calls spread over
// every address of the target (round_robin), and grpc-js itself retries
// UNAVAILABLE for the calls a repeat cannot harm (reads; Insert and Delete,
// which this client always sends with a request id).
const SERVICE_CONFIG = JSON.stringify({
  loadBalancingConfig: [{ round_robin: {} }],
  methodConfig: [{
    name: ["Lookup", "Count", "Insert", "Delete", "GetFilter", "ListFilters", "GetServerInfo"]
      .map((method) => ({ service: "cuckoo.v1.FilterService", method })),
    retryPolicy: {
      maxAttempts: 5,
      initialBackoff: "0.05s",
      maxBackoff: "1s",
      backoffMultiplier: 2,
      retryableStatusCodes: ["UNAVAILABLE"],
    },
  }],
});

const RETRY_INITIAL_BACKOFF_MS = 100;
const RETRY_MAX_BACKOFF_MS = 2000;
const MAX_REQUEST_ID = 128;
const MAX_TOKEN = 512;
const PRINTABLE = /^[!-~]+$/;
// gRPC's message for a stream the server's transport reset (its memory was
// full): retried like UNAVAILABLE, unlike cuckood's own RESOURCE_EXHAUSTED.
const TRANSPORT_RESET = "Received RST_STREAM";
// An Insert stopped part way by a shutdown: that prefix was applied, so it
// is not sent again (the server would refuse the repeat with ABORTED).
const CUT_SHORT = /the batch was cut short after its first (\d+) of (\d+) keys/;

function retriable(error: CuckooError): boolean {
  return error.code === grpc.status.UNAVAILABLE ||
    (error.code === grpc.status.RESOURCE_EXHAUSTED && error.details.startsWith(TRANSPORT_RESET));
}

/** `service` loaded once per process from the package's proto. */
let serviceConstructor: grpc.ServiceClientConstructor | undefined;
function loadService(): grpc.ServiceClientConstructor {
  if (!serviceConstructor) {
    const definition = protoLoader.loadSync(PROTO_PATH, {
      keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(definition) as any;
    serviceConstructor = pkg.cuckoo.v1.FilterService as grpc.ServiceClientConstructor;
  }
  return serviceConstructor;
}

function readPem(what: string, source: string | Buffer): Buffer {
  let data: Buffer;
  let where: string;
  if (Buffer.isBuffer(source)) {
    data = source;
    where = `${what} (a Buffer)`;
  } else if (typeof source === "string") {
    try {
      data = readFileSync(source);
    } catch (e) {
      throw new Error(`cannot read the ${what} file ${JSON.stringify(source)}: ${(e as Error).message}`);
    }
    where = `${what} file ${JSON.stringify(source)}`;
  } else {
    throw new TypeError(`${what} must be a file path or a Buffer`);
  }
  // grpc-js would only fail the handshake, later and vaguely.
  if (!data.includes("-----BEGIN ")) throw new Error(`the ${where} is not PEM (no '-----BEGIN ' line)`);
  return data;
}

function encodeKeys(keys: Iterable<Key>): Buffer[] {
  if (typeof keys === "string" || keys instanceof Uint8Array) {
    throw new TypeError("keys must be an array (or iterable) of keys, not a single key: wrap one key in an array");
  }
  const out: Buffer[] = [];
  let i = 0;
  for (const key of keys) {
    if (typeof key === "string") out.push(Buffer.from(key, "utf8"));
    // A copy: the caller may reuse its array while the call is in flight.
    else if (key instanceof Uint8Array) out.push(Buffer.from(key));
    else throw new TypeError(`keys[${i}] is a ${typeof key}; keys must be strings or Uint8Arrays`);
    i++;
  }
  return out;
}

/** Consecutive [begin, end) runs of `keys` within both limits (a run holds at least one key). */
function splitBatches(keys: Buffer[], maxKeys: number, maxBytes: number): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  let begin = 0;
  while (begin < keys.length) {
    let end = begin + 1;
    let size = keys[begin].length;
    while (end < keys.length && end - begin < maxKeys) {
      size += keys[end].length;
      if (size > maxBytes) break;
      end++;
    }
    runs.push([begin, end]);
    begin = end;
  }
  return runs;
}

function requestId(given: string | undefined): string {
  if (given === undefined) return randomBytes(16).toString("hex");
  if (typeof given !== "string" || given.length > MAX_REQUEST_ID || !PRINTABLE.test(given)) {
    throw new RangeError(`requestId ${JSON.stringify(given)} must be 1 to ${MAX_REQUEST_ID} printable ASCII characters, ! to ~`);
  }
  return given;
}

const num = (x: unknown): number => Number(x ?? 0);
const date = (t: any): Date | null =>
  t ? new Date(Number(t.seconds) * 1000 + Math.floor(Number(t.nanos ?? 0) / 1e6)) : null;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function filterInfo(f: any, logPosition: unknown, created?: boolean): FilterInfo {
  const info: FilterInfo = {
    name: f.name,
    capacity: num(f.capacity),
    fingerprintBits: f.fingerprint_bits,
    bucketSize: f.bucket_size,
    shards: f.shards,
    maxKicks: f.max_kicks,
    seed: BigInt(f.seed ?? 0),
    hashId: f.hash_id,
    bucketsPerShard: num(f.buckets_per_shard),
    slots: num(f.slots),
    semiSort: f.semi_sort,
    items: num(f.items),
    loadFactor: f.load_factor,
    memoryBytes: num(f.memory_bytes),
    bitsPerItem: f.bits_per_item,
    expectedFalsePositiveRate: f.expected_false_positive_rate,
    falsePositiveRateAtCapacity: f.false_positive_rate_at_capacity,
    lastSnapshotTime: date(f.last_snapshot_time),
    lastSnapshotBytes: num(f.last_snapshot_bytes),
    unsnapshottedChanges: num(f.unsnapshotted_changes),
    hasUnsnapshottedChanges: f.has_unsnapshotted_changes,
    growthFactor: f.growth_factor,
    maxCapacity: num(f.max_capacity),
    falsePositiveRate: f.false_positive_rate,
    falsePositiveBound: f.false_positive_bound,
    reachableCapacity: num(f.reachable_capacity),
    maxGenerations: f.max_generations,
    generations: (f.generations ?? []).map((g: any) => ({
      fingerprintBits: g.fingerprint_bits, shards: g.shards, slots: num(g.slots),
      items: num(g.items), memoryBytes: num(g.memory_bytes), falsePositiveBound: g.false_positive_bound,
    })),
    growOnRepeats: f.grow_on_repeats,
    expireAt: date(f.expire_at),
    logPosition: num(logPosition),
  };
  if (created !== undefined) info.created = created;
  return info;
}

function serverInfo(r: any): ServerInfo {
  const c = r.cluster;
  const window = r.dedup_window;
  return {
    version: r.version,
    maxBatchKeys: r.max_batch_keys,
    maxKeyBytes: r.max_key_bytes,
    maxMessageBytes: num(r.max_message_bytes),
    maxFilters: r.max_filters,
    memoryBudgetBytes: num(r.memory_budget_bytes),
    memoryUsedBytes: num(r.memory_used_bytes),
    filters: r.filters,
    dataDir: r.data_dir,
    durability: r.durability,
    mode: r.mode,
    appliedLogPosition: num(r.applied_log_position),
    dedupWindowMs: window ? Number(window.seconds) * 1000 + Math.floor(Number(window.nanos ?? 0) / 1e6) : null,
    cluster: c ? {
      replicaId: c.replica_id, natsStatus: c.nats_status, natsServer: c.nats_server, stream: c.stream,
      streamReplicas: c.stream_replicas, streamLastPosition: num(c.stream_last_position),
      streamFirstPosition: num(c.stream_first_position), lag: num(c.lag),
      logIdentity: c.log_identity, problem: c.problem, logCheck: c.log_check,
    } : null,
  };
}

function results<T>(items: T[], logPosition: number): Results<T> {
  return Object.assign(items, { logPosition });
}

/**
 * A client for a cuckood server (or the replicas of a cluster behind one
 * target). Connects lazily: an unreachable server shows as a CuckooError
 * UNAVAILABLE on the first call, after retryTimeoutMs. Every method returns a
 * promise that rejects with a {@link CuckooError} when the call fails.
 *
 * ```ts
 * const client = new Client({ target: "localhost:50051" });
 * await client.createFilter("users", { capacity: 1_000_000, falsePositiveRate: 0.001, ifNotExists: true });
 * await client.insert("users", ["alice", "bob"]);   // ["INSERTED", "INSERTED"]
 * await client.lookup("users", ["alice", "carol"]); // [true, false] (false is certain)
 * client.close();
 * ```
 */
export class Client {
  /** The grpc-js client of cuckoo.v1.FilterService, for calls this class lacks (add {@link metadata}). */
  readonly grpcClient: grpc.Client;
  readonly target: string;
  private readonly timeoutMs: number | null;
  private readonly retryTimeoutMs: number;
  private readonly readYourWrites: boolean;
  private readonly maxBatchKeys?: number;
  private readonly maxBatchBytes?: number;
  private readonly token: string;
  private limits?: Promise<[number, number]>;
  private position = 0;
  private closed = false;

  constructor(options: ClientOptions = {}) {
    const target = options.target ?? DEFAULT_TARGET;
    const timeoutMs = options.timeoutMs === undefined ? 30000 : options.timeoutMs;
    if (timeoutMs !== null && !(timeoutMs > 0)) throw new RangeError(`timeoutMs must be positive or null, not ${timeoutMs}`);
    const retryTimeoutMs = options.retryTimeoutMs ?? 30000;
    if (!(retryTimeoutMs >= 0)) throw new RangeError(`retryTimeoutMs must be >= 0, not ${retryTimeoutMs}`);
    for (const name of ["maxBatchKeys", "maxBatchBytes"] as const) {
      const v = options[name];
      if (v !== undefined && !(Number.isInteger(v) && v >= 1)) throw new RangeError(`${name} must be a positive integer, not ${v}`);
    }
    const token = options.token ?? process.env.CUCKOO_TOKEN ?? "";
    if (token !== "" && (token.length > MAX_TOKEN || !PRINTABLE.test(token))) {
      throw new RangeError(`a token is 1 to ${MAX_TOKEN} of the characters ! to ~ (no spaces or line breaks); this one has ${token.length} characters`);
    }
    if ((options.cert === undefined) !== (options.key === undefined)) {
      throw new TypeError(options.key === undefined ? "cert needs key (its private key)" : "key needs cert (its certificate)");
    }
    const tls = Boolean(options.tls) || options.ca !== undefined || options.cert !== undefined;
    if (options.serverName !== undefined && !tls) throw new TypeError("serverName applies only with TLS: give tls: true or ca");

    const channelOptions: grpc.ChannelOptions = {
      "grpc.service_config": SERVICE_CONFIG,
      "grpc.enable_retries": 1,
      "grpc.max_receive_message_length": options.maxReceiveMessageBytes ?? 64 << 20,
      // What grpc-js keeps of a call's request to send it again: above any
      // request a server takes (a batch is up to max_message_bytes / 4).
      "grpc.per_rpc_retry_buffer_size": 1 << 30,
      "grpc.retry_buffer_size": 1 << 30,
    };
    if (options.serverName !== undefined) channelOptions["grpc.ssl_target_name_override"] = options.serverName;
    Object.assign(channelOptions, options.channelOptions);
    const credentials = tls
      ? grpc.credentials.createSsl(
          options.ca !== undefined ? readPem("ca", options.ca) : null,
          options.key !== undefined ? readPem("key", options.key) : null,
          options.cert !== undefined ? readPem("cert", options.cert) : null)
      : grpc.credentials.createInsecure();
    const Service = loadService();
    this.grpcClient = new Service(target, credentials, channelOptions);
    this.target = target;
    this.timeoutMs = timeoutMs;
    this.retryTimeoutMs = retryTimeoutMs;
    this.readYourWrites = options.readYourWrites ?? true;
    this.maxBatchKeys = options.maxBatchKeys;
    this.maxBatchBytes = options.maxBatchBytes;
    this.token = token;
  }

  /** Closes the channel. Calls after this throw. Idempotent. */
  close(): void {
    if (!this.closed) {
      this.closed = true;
      this.grpcClient.close();
    }
  }

  /** The metadata each call carries (the token), for calls made through {@link grpcClient}. */
  metadata(): grpc.Metadata {
    const metadata = new grpc.Metadata();
    if (this.token) metadata.set("authorization", `Bearer ${this.token}`);
    return metadata;
  }

  /**
   * The largest log position seen in a response (0: none yet). With
   * readYourWrites every read and write asks the server to have applied this
   * far. Settable: another client's, to read its writes; 0 to forget it.
   */
  get lastLogPosition(): number {
    return this.position;
  }
  set lastLogPosition(position: number) {
    if (!(Number.isInteger(position) && position >= 0)) throw new RangeError(`a log position is an integer >= 0, not ${position}`);
    this.position = position;
  }

  /**
   * Creates a filter sized for `options.capacity` keys; resolves to its info
   * (`created` false when ifNotExists found it). Retried only with
   * ifNotExists: without, a second try of a create that was applied would
   * fail with ALREADY_EXISTS.
   */
  async createFilter(name: string, options: CreateFilterOptions): Promise<FilterInfo> {
    const request: Record<string, unknown> = {
      name, capacity: options.capacity, if_not_exists: Boolean(options.ifNotExists),
    };
    const fields: Array<[keyof CreateFilterOptions, string]> = [
      ["falsePositiveRate", "false_positive_rate"], ["fingerprintBits", "fingerprint_bits"],
      ["bucketSize", "bucket_size"], ["shards", "shards"], ["maxKicks", "max_kicks"],
      ["semiSort", "semi_sort"], ["growthFactor", "growth_factor"], ["maxCapacity", "max_capacity"],
    ];
    for (const [option, field] of fields) {
      if (options[option] !== undefined) request[field] = options[option];
    }
    if (options.seed !== undefined) request.seed = BigInt(options.seed).toString();
    const response = await this.call("CreateFilter", request, Boolean(options.ifNotExists), options);
    return filterInfo(response.filter, response.log_position, response.created);
  }

  /** The info of filter `name`. NOT_FOUND if there is none. */
  async getFilter(name: string, options: CallOptions = {}): Promise<FilterInfo> {
    const response = await this.call("GetFilter", { name, min_log_position: this.minPosition() }, true, options);
    return filterInfo(response.filter, response.log_position);
  }

  /** The info of every filter, sorted by name. */
  async listFilters(options: CallOptions = {}): Promise<FilterInfo[]> {
    const response = await this.call("ListFilters", { min_log_position: this.minPosition() }, true, options);
    return response.filters.map((f: any) => filterInfo(f, response.log_position));
  }

  /**
   * Drops filter `name`; resolves to the bytes freed. Never retried: a
   * repeat of a drop that was applied would answer NOT_FOUND.
   */
  async dropFilter(name: string, options: CallOptions = {}): Promise<number> {
    const response = await this.call("DropFilter", { name }, false, options);
    return num(response.freed_bytes);
  }

  /** The server's version, limits and log. */
  async getServerInfo(options: CallOptions = {}): Promise<ServerInfo> {
    return serverInfo(await this.call("GetServerInfo", {}, true, options));
  }

  /**
   * Adds keys; one {@link InsertResult} per key, in order. Sent with a
   * request id (options.requestId or a random one) that every retry repeats:
   * applied once. A batch split into several requests is not atomic: if one
   * fails, the error's `applied` says how many keys the earlier ones carried.
   */
  async insert(filter: string, keys: Iterable<Key>, options: InsertOptions = {}): Promise<Results<InsertResult>> {
    const id = requestId(options.requestId);
    return this.batched("Insert", keys, id, options,
      (chunk, rid, position) => ({ filter, keys: chunk, if_absent: Boolean(options.ifAbsent), request_id: rid, min_log_position: position }),
      (r) => r.results.map((x: string) => x.replace(/^INSERT_RESULT_/, "") as InsertResult));
  }

  /** Whether each key may be in the filter: false is certain, true may be a false positive. */
  async lookup(filter: string, keys: Iterable<Key>, options: CallOptions = {}): Promise<Results<boolean>> {
    return this.batched("Lookup", keys, undefined, options,
      (chunk, _rid, position) => ({ filter, keys: chunk, min_log_position: position }),
      (r) => r.present as boolean[]);
  }

  /**
   * Removes one copy of each key; one {@link DeleteResult} per key. Only
   * delete keys you inserted. Request ids as {@link insert}: a delete
   * applied twice would remove two copies.
   */
  async delete(filter: string, keys: Iterable<Key>, options: DeleteOptions = {}): Promise<Results<DeleteResult>> {
    const id = requestId(options.requestId);
    return this.batched("Delete", keys, id, options,
      (chunk, rid, position) => ({ filter, keys: chunk, request_id: rid, min_log_position: position }),
      (r) => r.results.map((x: string) => x.replace(/^DELETE_RESULT_/, "") as DeleteResult));
  }

  /** An estimate of how many copies of each key the filter holds: never less than the truth. */
  async count(filter: string, keys: Iterable<Key>, options: CallOptions = {}): Promise<Results<number>> {
    return this.batched("Count", keys, undefined, options,
      (chunk, _rid, position) => ({ filter, keys: chunk, min_log_position: position }),
      (r) => r.counts.map(num));
  }

  private minPosition(): string {
    return this.readYourWrites ? String(this.position) : "0";
  }

  private saw(response: any): void {
    const position = num(response?.log_position ?? response?.applied_log_position);
    if (position > this.position) this.position = position;
  }

  private unary(method: string, request: unknown, timeoutMs: number | null): Promise<any> {
    return new Promise((resolve, reject) => {
      const callOptions: grpc.CallOptions = timeoutMs === null ? {} : { deadline: Date.now() + timeoutMs };
      const fn = (this.grpcClient as any)[method] as Function;
      fn.call(this.grpcClient, request, this.metadata(), callOptions, (error: grpc.ServiceError | null, response: any) => {
        if (error) reject(CuckooError.fromServiceError(error));
        else resolve(response);
      });
    });
  }

  /**
   * Calls `method` with the deadline, again on a retriable error while
   * `retry` and retryTimeoutMs allow, each attempt with the same request (a
   * write: the same request id). An Insert cut short part way is not retried.
   */
  private async call(method: string, request: unknown, retry: boolean, options: CallOptions): Promise<any> {
    if (this.closed) throw new Error(`the client of ${this.target} is closed`);
    const timeoutMs = options.timeoutMs === undefined ? this.timeoutMs : options.timeoutMs;
    const start = Date.now();
    const giveUp = start + (retry ? this.retryTimeoutMs : 0);
    let backoff = RETRY_INITIAL_BACKOFF_MS;
    for (let attempts = 1; ; attempts++) {
      try {
        const response = await this.unary(method, request, timeoutMs);
        this.saw(response);
        return response;
      } catch (e) {
        const error = e as CuckooError;
        const now = Date.now();
        if (!retriable(error) || now >= giveUp || this.closed || CUT_SHORT.test(error.details)) {
          if (attempts > 1) {
            throw new CuckooError(error.code, `${error.details} (after ${attempts} attempts in ${((now - start) / 1000).toFixed(1)} s)`);
          }
          throw error;
        }
        // Wait at most until the budget's end, and try once more then.
        await sleep(Math.min(backoff / 2 + Math.random() * backoff / 2, giveUp - now));
        backoff = Math.min(backoff * 2, RETRY_MAX_BACKOFF_MS);
      }
    }
  }

  private batchLimits(): Promise<[number, number]> {
    if (!this.limits) {
      const keys = this.maxBatchKeys;
      const bytes = this.maxBatchBytes;
      this.limits = keys !== undefined && bytes !== undefined
        ? Promise.resolve([keys, bytes])
        : this.getServerInfo().then((info) => [
            keys ?? Math.max(1, info.maxBatchKeys),
            bytes ?? Math.max(1, Math.floor(info.maxMessageBytes / 4)),
          ] as [number, number]);
      // A failed look-up is asked again by the next call.
      this.limits.catch(() => { this.limits = undefined; });
    }
    return this.limits;
  }

  /**
   * Sends `keys` in as many requests as the limits need and concatenates the
   * results. `writeId`: a write's request id (request i of several gets
   * `${writeId}.${i}`); undefined for a read.
   */
  private async batched<T>(method: string, keys: Iterable<Key>, writeId: string | undefined, options: CallOptions,
                           makeRequest: (chunk: Buffer[], requestId: string, position: string) => unknown,
                           take: (response: any) => T[]): Promise<Results<T>> {
    if (this.closed) throw new Error(`the client of ${this.target} is closed`);
    const encoded = encodeKeys(keys);
    const out = results<T>([], 0);
    if (encoded.length === 0) return out;
    const [maxKeys, maxBytes] = await this.batchLimits();
    const runs = splitBatches(encoded, maxKeys, maxBytes);
    let ids: string[] = runs.map(() => "");
    if (writeId !== undefined) {
      ids = runs.length === 1 ? [writeId] : runs.map((_, i) => `${writeId}.${i}`);
      if (ids[ids.length - 1].length > MAX_REQUEST_ID) {
        throw new RangeError(`requestId ${JSON.stringify(writeId)} is too long for a batch of ${runs.length} requests`);
      }
    }
    const total = encoded.length;
    for (let i = 0; i < runs.length; i++) {
      const [begin, end] = runs[i];
      let response: any;
      try {
        response = await this.call(method, makeRequest(encoded.slice(begin, end), ids[i], this.minPosition()), true, options);
      } catch (e) {
        const error = e as CuckooError;
        let applied = begin;
        const cut = CUT_SHORT.exec(error.details);
        if (cut && Number(cut[2]) === end - begin) applied = begin + Number(cut[1]);
        const details = applied > 0 && end - begin < total
          ? `${error.details} (the first ${applied} of ${total} keys were applied)` : error.details;
        throw new CuckooError(error.code, details, applied);
      }
      const got = take(response);
      if (got.length !== end - begin) {
        throw new CuckooError(grpc.status.INTERNAL,
          `the server returned ${got.length} results for ${end - begin} keys (the first ${end} of ${total} keys were applied)`, end);
      }
      for (const x of got) out.push(x);
      out.logPosition = Math.max(out.logPosition, num(response.log_position));
    }
    return out;
  }
}
