"""The cuckood client: :class:`Client`, its error and its result types.

A thin layer over the generated ``cuckoo.v1.FilterService`` stub, mirroring the
C++ client (``client/cuckoo_client.h``). What it adds to the stub:

* a deadline on every call (``timeout``, seconds);
* errors as one exception type, :class:`CuckooError`, with the gRPC status code
  and the server's message;
* keys given as ``str`` (encoded UTF-8) or ``bytes``, in any iterable;
* batches of any size: keys are split into requests that respect the server's
  limits (asked once with GetServerInfo) and the per-key results are put back
  together in input order;
* per-key results as Python enums (:class:`InsertResult`,
  :class:`DeleteResult`) and filter / server info as frozen dataclasses
  (:class:`FilterInfo`, :class:`ServerInfo`).

A batch split into several requests is not atomic: if request k fails, the
requests before it were applied, and the error says how many keys that was
(:attr:`CuckooError.applied`).

Security: ``Client(..., tls=True, ca=..., cert=..., key=...)`` connects over
TLS (mutual TLS with a client certificate), and ``token=`` (or the environment
variable ``CUCKOO_TOKEN``) is sent with every call, streams included, as the
metadata ``authorization: Bearer TOKEN``.

For a cluster (cuckood --nats) it also:

* connects to several replicas as one channel (``"h1:50051,h2:50051"``, a
  list, or a ``dns:///`` name) and spreads calls over them (round_robin),
  with gRPC's own retry of UNAVAILABLE on another replica
  (:func:`channel_options`);
* retries calls that fail with UNAVAILABLE (or RESOURCE_EXHAUSTED from the
  transport) for up to ``retry_timeout`` seconds (a stream-leader election
  takes several), Insert and Delete with their request id, so that a retry
  is never applied twice;
* reads its own writes: every call carries the largest log position the
  client has seen (``min_log_position``), so a replica behind the one that
  took a write waits until it has applied it.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import ipaddress
import json
import logging
import os
import random
import re
import socket
import threading
import time
import uuid
from typing import (Any, BinaryIO, Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar,
                    Union)

import grpc

from cuckoo_client.cuckoo.v1 import filter_service_pb2 as _pb
from cuckoo_client.cuckoo.v1 import filter_service_pb2_grpc as _pb_grpc

#: What a key may be: ``str`` (sent as its UTF-8 bytes) or a bytes-like object.
Key = Union[str, bytes, bytearray, memoryview]

#: The server a :class:`Client` talks to when given no target.
DEFAULT_TARGET = "localhost:50051"

#: The channel's service config (see :func:`channel_options`): calls spread
#: over every address the target resolves to (round_robin), and gRPC itself
#: retries a call of the FilterService that fails with UNAVAILABLE, up to 5
#: attempts (about 2 s of backoff), on the next replica.
SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    # Only methods a repeat cannot harm: reads, and Insert/Delete (sent
    # with a request id by this client). A repeated DropFilter would answer
    # NOT_FOUND for a drop that happened.
    "methodConfig": [{
        "name": [{"service": "cuckoo.v1.FilterService", "method": m}
                 for m in ("Lookup", "Count", "Insert", "Delete", "GetFilter",
                           "ListFilters", "GetServerInfo")],
        "retryPolicy": {
            "maxAttempts": 5,
            "initialBackoff": "0.05s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }],
})

# gRPC keeps what a call sent, to send it again on a retry, only up to a
# limit per call: 256 KiB by default (grpc.per_rpc_retry_buffer_size). A
# larger request silently loses its retries (it is committed to its first
# attempt), and a batch is up to a quarter of the server's max_message_bytes
# (16 MiB by default) of keys plus framing. So the limit is set far above any
# request a server takes. It bounds, it does not allocate: the buffered bytes
# are the request, which is in memory anyway. grpc.retry_buffer_size is
# grpc-js's limit for all calls of a channel together; gRPC C-core (grpcio)
# has only the per-call one and ignores it.
_RETRY_BUFFER_BYTES = 1 << 30

# The client's own retries, on top of gRPC's (Client(retry_timeout=...)):
# exponential backoff from 0.1 s to 2 s, each wait drawn at random between
# half and all of it.
_RETRY_INITIAL_BACKOFF = 0.1
_RETRY_MAX_BACKOFF = 2.0

# The longest request_id the server takes, and its characters (! to ~).
_MAX_REQUEST_ID = 128
_REQUEST_ID_CHARS = re.compile(r"[!-~]+")

# gRPC's message for a stream the server's transport reset ("Received
# RST_STREAM with error code 11": its memory was full). Such a
# RESOURCE_EXHAUSTED is retried like UNAVAILABLE; cuckood's own (a limit
# reached) is not: a repeat would be refused the same way.
_TRANSPORT_RESET = "Received RST_STREAM"


def _retriable(error: "CuckooError") -> bool:
    """Whether the client's own retries retry `error`: UNAVAILABLE, and
    RESOURCE_EXHAUSTED from the transport. Both may follow a write that was
    applied: writes are retried only with their request id (applied once).
    Not DEADLINE_EXCEEDED (the caller's bound on an attempt) nor CANCELLED."""
    return (error.code == grpc.StatusCode.UNAVAILABLE
            or (error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                and error.message.startswith(_TRANSPORT_RESET)))


# The server's message for an Insert stopped part way (shutdown, deadline):
# that prefix was applied, so the request is not sent again.
_CUT_SHORT = re.compile(r"the batch was cut short after its first (\d+) of (\d+) keys")

# Targets that are one gRPC target already (a scheme), even with commas.
_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:",
            "google-c2p:")

_log = logging.getLogger(__name__)

# Bytes per ImportFilter chunk (the server takes at most 1 MiB of data a chunk).
_IMPORT_CHUNK_BYTES = 1 << 20

# Client._call's default timeout: the client's.
_CLIENT_TIMEOUT = object()

# The token's metadata key (gRPC keys are lowercase) and what the server takes
# as a token: 1 to 512 of the characters ! to ~.
AUTHORIZATION_METADATA_KEY = "authorization"
_MAX_TOKEN_CHARS = 512
_TOKEN_CHARS = re.compile(r"[!-~]+")

#: A PEM file for ``Client(ca=, cert=, key=)``: its path, or its contents as bytes.
PemSource = Union[str, "os.PathLike[str]", bytes]

_T = TypeVar("_T")


def channel_options(max_receive_message_bytes: int = 64 << 20) -> List[Tuple[str, Any]]:
    """The gRPC channel options a :class:`Client` makes its channel with.

    :data:`SERVICE_CONFIG` (round_robin over the target's addresses, gRPC's
    retry of UNAVAILABLE), retries enabled, retry buffers large enough for
    any request, and the largest response accepted. Pass them to your own
    channel (``grpc.secure_channel(target, creds, options=channel_options())``)
    to keep that behaviour with ``Client(channel=...)``.
    """
    return [
        ("grpc.max_receive_message_length", max_receive_message_bytes),
        ("grpc.service_config", SERVICE_CONFIG),
        ("grpc.enable_retries", 1),
        ("grpc.per_rpc_retry_buffer_size", _RETRY_BUFFER_BYTES),
        ("grpc.retry_buffer_size", _RETRY_BUFFER_BYTES),
    ]


def _read_pem(what: str, source: PemSource) -> bytes:
    """The PEM bytes of `source`: itself if bytes, else the file it names."""
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        where = f"{what}= (bytes)"
    elif isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as e:
            raise type(e)(e.errno, f"cannot read the {what}= file {os.fspath(source)!r}: "
                          f"{e.strerror}") from e
        where = f"{what}= file {os.fspath(source)!r}"
    else:
        raise TypeError(f"{what} must be a path or bytes, not {type(source).__name__}")
    # grpc would only fail the handshake, later and vaguely.
    if b"-----BEGIN " not in data:
        raise ValueError(f"the {where} is not PEM (no '-----BEGIN ' line)")
    return data


def validate_token(token: str) -> None:
    """Raises ValueError unless `token` is 1 to 512 of the characters ! to ~."""
    if not isinstance(token, str):
        raise TypeError(f"a token is a str, not {type(token).__name__}")
    if not 0 < len(token) <= _MAX_TOKEN_CHARS or not _TOKEN_CHARS.fullmatch(token):
        raise ValueError(f"a token is 1 to {_MAX_TOKEN_CHARS} of the characters ! to ~ (no "
                         f"spaces or line breaks); this one has {len(token)} characters")


def _split_host_port(address: str) -> Tuple[str, int]:
    """``("host", port)`` of ``"host:port"`` or ``"[v6]:port"``; ValueError if malformed."""
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or not address[close + 1:].startswith(":"):
            raise ValueError(f"{address!r} is not [IPv6 address]:port")
        host, port = address[1:close], address[close + 2:]
    else:
        host, sep, port = address.rpartition(":")
        if not sep or not host or ":" in host:
            raise ValueError(f"{address!r} is not host:port (an IPv6 address goes in brackets: "
                             "[::1]:50051)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} has no valid port")
    return host, int(port)


def channel_target(target: Union[str, Sequence[str]]) -> str:
    """The one gRPC target for `target`: a server, or several as a list.

    * One target (a string without commas, a list of one, or any string with
      a scheme such as ``"dns:///cuckood-ready.ns.svc:50051"`` or
      ``"ipv4:10.0.0.1:50051,10.0.0.2:50051"``) is returned as is: gRPC
      resolves it, and the channel balances over all of its addresses.
    * Several ``host:port`` (``"h1:50051,h2:50051"`` or a list; IPv6 as
      ``[::1]:50051``) become ``"ipv4:a:p,b:p"`` (or ``"ipv6:[a]:p,..."``).
      Host names are resolved once, here, with ``socket.getaddrinfo`` (all of
      their addresses; IPv4 when every host has one, else IPv6, with IPv4
      addresses mapped into it when the two are mixed). A name that does not
      resolve is left out, with a warning in the ``cuckoo_client.client``
      log.

    Raises:
        ValueError: an entry of a list is not ``host:port``, or has a scheme.
        CuckooError: ``UNAVAILABLE``, none of the names resolves.
    """
    if isinstance(target, str):
        stripped = target.strip()
        if "," not in stripped or "://" in stripped or stripped.lower().startswith(_SCHEMES):
            return stripped
        parts = stripped.split(",")
    else:
        parts = list(target)
        for part in parts:
            if not isinstance(part, str):
                raise TypeError(f"a target must be a str, not {type(part).__name__}")
    parts = [p.strip() for p in parts if p.strip()]
    if not parts:
        raise ValueError(f"no target in {target!r}")
    if len(parts) == 1:
        return parts[0]
    for part in parts:
        if "://" in part or part.lower().startswith(_SCHEMES):
            raise ValueError(f"{part!r}: a list of servers takes host:port each; a gRPC target "
                             "with a scheme (dns:///name:port, ...) goes alone")
    hosts = [(part, *_split_host_port(part)) for part in parts]  # All checked, then resolved.
    resolved: List[Tuple[List[str], List[str], int]] = []  # (IPv4s, IPv6s, port) per host.
    failures = []
    for part, host, port in hosts:
        v4: List[str] = []
        v6: List[str] = []
        try:
            literal = ipaddress.ip_address(host)
            (v4 if literal.version == 4 else v6).append(str(literal))
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as e:
                _log.warning("cuckoo_client: %s does not resolve (%s); left out", part, e)
                failures.append(f"{part}: {e}")
                continue
            for family, _, _, _, sockaddr in infos:
                if family == socket.AF_INET and sockaddr[0] not in v4:
                    v4.append(sockaddr[0])
                elif family == socket.AF_INET6 and sockaddr[0] not in v6:
                    v6.append(sockaddr[0].split("%")[0])
        if v4 or v6:
            resolved.append((v4, v6, port))
    if not resolved:
        raise CuckooError(grpc.StatusCode.UNAVAILABLE,
                          "none of the servers resolves: " + "; ".join(failures))
    addresses: List[str] = []
    if all(v4 for v4, _, _ in resolved):
        for v4, _, port in resolved:
            addresses += [f"{a}:{port}" for a in v4]
        scheme = "ipv4:"
    else:
        for v4, v6, port in resolved:
            addresses += [f"[{a}]:{port}" for a in (v6 if v6 else ["::ffff:" + x for x in v4])]
        scheme = "ipv6:"
    return scheme + ",".join(dict.fromkeys(addresses))  # Each address once, in order.


class CuckooError(Exception):
    """A call that failed: the gRPC status code and message.

    Raised by every :class:`Client` method for a status other than OK, whether
    it came from the server (see ``proto/cuckoo/v1/filter_service.proto`` for
    which code means what) or from gRPC itself (``UNAVAILABLE`` when the
    server cannot be reached, ``DEADLINE_EXCEEDED`` after ``timeout``).

    Attributes:
        code: the :class:`grpc.StatusCode`, e.g. ``grpc.StatusCode.NOT_FOUND``.
        message: the server's message, e.g. ``filter "x" not found``. For a
            batch that failed after some of its requests succeeded it ends
            with ``(the first N of M keys were applied)``.
        applied: how many keys, from the start of the input, went in requests
            that succeeded before the one that failed (0 when nothing was
            sent or the first request failed). Those keys were inserted or
            deleted; the rest were not.

    ``str(error)`` is ``"CODE: message"``, e.g. ``NOT_FOUND: filter "x" not found``.
    """

    def __init__(self, code: grpc.StatusCode, message: str, applied: int = 0) -> None:
        """Makes an error with status `code`, `message` and `applied` keys."""
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.applied = applied

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "CuckooError":
        """The CuckooError for an exception raised by a gRPC stub call."""
        code_fn = getattr(error, "code", None)
        details_fn = getattr(error, "details", None)
        code = code_fn() if callable(code_fn) else None
        message = details_fn() if callable(details_fn) else None
        return cls(code if code is not None else grpc.StatusCode.UNKNOWN,
                   message if message is not None else str(error))

    def __str__(self) -> str:
        """``"CODE: message"``, e.g. ``NOT_FOUND: filter "x" not found``."""
        return f"{self.code.name}: {self.message}"

    def __repr__(self) -> str:
        """The constructor call that makes this error."""
        return f"CuckooError({self.code}, {self.message!r}, applied={self.applied})"


class InsertResult(enum.IntEnum):
    """What an insert did with one key (``cuckoo.v1.InsertResult``)."""

    #: Never sent by the server; the proto's zero value.
    UNSPECIFIED = _pb.INSERT_RESULT_UNSPECIFIED
    #: The key was added.
    INSERTED = _pb.INSERT_RESULT_INSERTED
    #: ``if_absent`` only: the filter already (probably) holds the key; not added.
    ALREADY_PRESENT = _pb.INSERT_RESULT_ALREADY_PRESENT
    #: No room for the key; the filter is exactly as it was before the attempt.
    FULL = _pb.INSERT_RESULT_FULL


class DeleteResult(enum.IntEnum):
    """What a delete did with one key (``cuckoo.v1.DeleteResult``)."""

    #: Never sent by the server; the proto's zero value.
    UNSPECIFIED = _pb.DELETE_RESULT_UNSPECIFIED
    #: One copy of the key's fingerprint was removed.
    DELETED = _pb.DELETE_RESULT_DELETED
    #: Neither of the key's buckets holds its fingerprint; nothing changed.
    NOT_FOUND = _pb.DELETE_RESULT_NOT_FOUND


@dataclasses.dataclass(frozen=True)
class Generation:
    """One table generation of a growing filter (``cuckoo.v1.FilterInfo.Generation``).

    The g-th table of every shard that has grown that far.
    """

    #: Its fingerprint size (longer in later generations).
    fingerprint_bits: int
    #: Shards that have this generation.
    shards: int
    #: Fingerprint slots and fingerprints stored in those shards' tables of it.
    slots: int
    items: int
    #: Bytes of those tables.
    memory_bytes: int
    #: Its share of the false-positive rate: its rate when full.
    false_positive_bound: float

    @classmethod
    def from_proto(cls, message: Any) -> "Generation":
        """The Generation of a ``cuckoo.v1.FilterInfo.Generation`` message."""
        return cls(**{f.name: getattr(message, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class FilterInfo:
    """A filter's settings and state (``cuckoo.v1.FilterInfo``).

    The fields are the proto's, documented in
    ``proto/cuckoo/v1/filter_service.proto``; ``raw`` is the message itself
    (for fields this class does not copy). ``created`` is set only by
    :meth:`Client.create_filter`: ``True`` when it made the filter, ``False``
    when ``if_not_exists`` returned an existing one; elsewhere it is ``None``.
    ``log_position`` is the response's: the position of the filter's creation
    (create_filter), or the position the replica had applied when it answered
    (get_filter, list_filters; create_filter of an existing filter). It is
    not part of the comparison of two FilterInfo.
    """

    name: str
    #: Settings, fixed at creation.
    capacity: int
    fingerprint_bits: int
    bucket_size: int
    shards: int
    max_kicks: int
    seed: int
    hash_id: int
    buckets_per_shard: int
    slots: int
    #: True: semi-sorted buckets (f - 1 bits per slot); False: packed (f bits).
    semi_sort: bool
    #: State.
    items: int
    load_factor: float
    memory_bytes: int
    bits_per_item: float
    expected_false_positive_rate: float
    false_positive_rate_at_capacity: float
    #: Persistence: the latest snapshot on disk (``None``: there is none), its
    #: size, and the changes since it (only in the write-ahead log: a restart
    #: replays them).
    last_snapshot_bytes: int = 0
    unsnapshotted_changes: int = 0
    has_unsnapshotted_changes: bool = False
    #: Growth (``create_filter(growth_factor=...)``): 0 and 0 for a fixed
    #: filter. ``false_positive_rate`` is the rate a growing filter's
    #: generations share (0 for a fixed filter); ``false_positive_bound`` no
    #: lookup's false-positive rate exceeds, at any load;
    #: ``reachable_capacity`` the keys it can grow to hold;
    #: ``max_generations`` the most tables a shard may have; ``generations``
    #: one :class:`Generation` per table generation, oldest first.
    growth_factor: int = 0
    max_capacity: int = 0
    false_positive_rate: float = 0.0
    false_positive_bound: float = 0.0
    reachable_capacity: int = 0
    max_generations: int = 0
    generations: Tuple[Generation, ...] = ()
    last_snapshot_time: Optional[datetime.datetime] = None
    #: When the server drops the filter (:meth:`Client.set_filter_expiry`);
    #: ``None``: never.
    expire_at: Optional[datetime.datetime] = None
    created: Optional[bool] = None
    log_position: Optional[int] = dataclasses.field(default=None, compare=False)
    raw: Optional[_pb.FilterInfo] = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, message: _pb.FilterInfo, created: Optional[bool] = None,
                   log_position: Optional[int] = None) -> "FilterInfo":
        """The FilterInfo of a ``cuckoo.v1.FilterInfo`` message."""
        when = (message.last_snapshot_time.ToDatetime(tzinfo=datetime.timezone.utc)
                if message.HasField("last_snapshot_time") else None)
        generations = tuple(Generation.from_proto(g) for g in message.generations)
        expire_at = (message.expire_at.ToDatetime(tzinfo=datetime.timezone.utc)
                     if message.HasField("expire_at") else None)
        return cls(**_fields_of(cls, message), last_snapshot_time=when, created=created,
                   log_position=log_position, generations=generations, expire_at=expire_at,
                   raw=message)


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """A replica's view of its cluster (``cuckoo.v1.ClusterInfo``, :attr:`ServerInfo.cluster`).

    ``raw`` is the message itself.
    """

    #: This replica's name (--replica-id).
    replica_id: str
    #: The NATS connection: "connected", "reconnecting", "disconnected" or
    #: "closed", and the server it is connected to.
    nats_status: str
    nats_server: str
    #: The JetStream stream that is the log, and its replication factor.
    stream: str
    stream_replicas: int
    #: The last and the oldest position the stream holds (as last seen by
    #: this replica).
    stream_last_position: int
    stream_first_position: int
    #: stream_last_position - applied_log_position: how far this replica is
    #: behind the log.
    lag: int
    #: Names the stream's incarnation ("<stream>@<creation time>").
    log_identity: str = ""
    #: Why the replica cannot apply the stream now (e.g. it is bootstrapping
    #: from a peer); empty when it can.
    problem: str = ""
    raw: Optional[_pb.ClusterInfo] = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, message: _pb.ClusterInfo) -> "ClusterInfo":
        """The ClusterInfo of a ``cuckoo.v1.ClusterInfo`` message."""
        return cls(**_fields_of(cls, message), raw=message)


@dataclasses.dataclass(frozen=True)
class ExportInfo:
    """What :meth:`Client.export_filter` wrote."""

    #: The snapshot file's size.
    bytes: int
    #: Items in the snapshot.
    items: int
    #: The log position the server had applied when the export started:
    #: every write acknowledged at or before it is in the file.
    log_position: int
    #: The filter's id recorded in the file (its creation's log position).
    filter_id: int
    #: The filter's info when its snapshot had been written.
    filter: "FilterInfo"


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """The server's version, limits and log (``cuckoo.v1.GetServerInfoResponse``).

    ``raw`` is the response message itself (for fields this class does not
    copy, such as ``durability``).
    """

    #: cuckood's version, e.g. "0.1.0".
    version: str
    #: Most keys one Insert / Lookup / Delete / Count request may carry.
    max_batch_keys: int
    #: Longest key, in bytes.
    max_key_bytes: int
    #: Largest request or response message, in bytes.
    max_message_bytes: int
    #: Most filters the server holds.
    max_filters: int
    #: Table memory all filters together may use, and what they use now.
    memory_budget_bytes: int
    memory_used_bytes: int
    #: Filters held now.
    filters: int
    #: "single" (one node, its own write-ahead log) or "cluster" (a replica
    #: whose log is a NATS JetStream stream).
    mode: str = ""
    #: The log position this server has applied.
    applied_log_position: int = 0
    #: Repeats of an Insert or Delete request_id within this long get the
    #: first one's results (``None`` if the server did not say).
    dedup_window: Optional[datetime.timedelta] = None
    #: The replica's view of its cluster; ``None`` for a single node.
    cluster: Optional[ClusterInfo] = None
    raw: Optional[_pb.GetServerInfoResponse] = dataclasses.field(
        default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, message: _pb.GetServerInfoResponse) -> "ServerInfo":
        """The ServerInfo of a ``cuckoo.v1.GetServerInfoResponse`` message."""
        window = (message.dedup_window.ToTimedelta() if message.HasField("dedup_window")
                  else None)
        cluster = (ClusterInfo.from_proto(message.cluster) if message.HasField("cluster")
                   else None)
        return cls(**_fields_of(cls, message), dedup_window=window, cluster=cluster,
                   raw=message)


class Results(List[_T]):
    """The per-key results of a call: a ``list``, plus the call's log position.

    ``log_position`` is the largest of its responses' (for a batch sent as
    several requests): for insert and delete, the position the last of them
    was applied at; for lookup and count, the position the replica had
    applied when it answered. Compares, prints and behaves as the list.
    """

    def __init__(self, items: Iterable[_T] = (), log_position: int = 0) -> None:
        """A list of `items` with `log_position`."""
        super().__init__(items)
        self.log_position = log_position


# Dataclass fields that are not copied from the message by name.
_NOT_COPIED = ("created", "raw", "last_snapshot_time", "log_position", "dedup_window", "cluster",
               "generations", "expire_at")


def _fields_of(cls: type, message: Any) -> dict:
    """The values of `cls`'s dataclass fields that `message` has, by name."""
    return {
        f.name: getattr(message, f.name)
        for f in dataclasses.fields(cls)
        if f.name not in _NOT_COPIED
    }


def encode_keys(keys: Iterable[Key]) -> List[bytes]:
    """The keys as a list of bytes: ``str`` encoded UTF-8, bytes-like copied.

    Raises:
        TypeError: `keys` is a single ``str`` or ``bytes`` (iterating it would
            make one key per character), or holds something else than
            ``str`` and bytes-like objects.
    """
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"keys must be an iterable of keys such as a list, not a single "
                        f"{type(keys).__name__}: wrap one key in a list")
    out: List[bytes] = []
    for i, key in enumerate(keys):
        if isinstance(key, bytes):
            out.append(key)
        elif isinstance(key, str):
            out.append(key.encode("utf-8"))
        elif isinstance(key, (bytearray, memoryview)):
            out.append(bytes(key))
        else:
            raise TypeError(f"keys[{i}] is a {type(key).__name__}; keys must be str or bytes")
    return out


def split_batches(keys: Sequence[bytes], max_keys: int,
                  max_bytes: int) -> List[Tuple[int, int]]:
    """Consecutive ``(begin, end)`` runs of `keys` that each fit one request.

    A run holds at most `max_keys` keys and `max_bytes` bytes of keys, except
    that a run always holds at least one key, however long: the server judges
    it. The same split as the C++ client's.
    """
    runs: List[Tuple[int, int]] = []
    n = len(keys)
    begin = 0
    while begin < n:
        end = begin + 1
        size = len(keys[begin])
        while end < n and end - begin < max_keys:
            size += len(keys[end])
            if size > max_bytes:
                break
            end += 1
        runs.append((begin, end))
        begin = end
    return runs


class Client:
    """A client for a cuckood server, or the replicas of a cluster. Safe to use from
    several threads.

    Example::

        with cuckoo_client.Client("localhost:50051") as client:
            client.create_filter("users", capacity=1_000_000,
                                 false_positive_rate=0.001, if_not_exists=True)
            client.insert("users", ["alice", b"bob"])   # [INSERTED, INSERTED]
            client.lookup("users", ["alice", "carol"])  # [True, False] (probably)

    Every method raises :class:`CuckooError` when a call fails.
    """

    def __init__(self,
                 target: Union[str, Sequence[str]] = DEFAULT_TARGET,
                 timeout: Optional[float] = 30.0,
                 max_batch_keys: Optional[int] = None,
                 max_batch_bytes: Optional[int] = None,
                 *,
                 channel: Optional[grpc.Channel] = None,
                 max_receive_message_bytes: int = 64 << 20,
                 retry_timeout: Optional[float] = 30.0,
                 read_your_writes: bool = True,
                 token: Optional[str] = None,
                 tls: bool = False,
                 ca: Optional[PemSource] = None,
                 cert: Optional[PemSource] = None,
                 key: Optional[PemSource] = None,
                 server_name: Optional[str] = None) -> None:
        """Makes a client for the cuckood at `target`, or the replicas it lists.

        Connects lazily: an unreachable server shows as a
        :class:`CuckooError` with code ``UNAVAILABLE`` on the first call
        (after `retry_timeout`).

        Args:
            target: ``"host:port"``; several, as ``"h1:50051,h2:50051"`` or a
                list (host names resolved once, now); or any gRPC target such
                as ``"dns:///cuckood-ready.ns.svc:50051"`` (every address it
                resolves to). See :func:`channel_target`. The calls are
                spread over all the addresses (round_robin), over a plaintext
                channel, or TLS with `tls`. Ignored when `channel` is given.
            timeout: deadline of each RPC in seconds (a large batch is several
                RPCs, each with this deadline, and so is each retry);
                ``None`` for no deadline.
            max_batch_keys: most keys per request; ``None``: the server's
                ``max_batch_keys``.
            max_batch_bytes: most key bytes per request; ``None``: a quarter
                of the server's ``max_message_bytes`` (a key costs a few bytes
                of framing on top of its own).
            channel: an existing channel to use instead of making one (for TLS,
                interceptors or other options). :meth:`close` leaves it open.
            max_receive_message_bytes: largest response accepted, in bytes
                (for the channel this client makes).
            retry_timeout: how long, in seconds, an RPC that fails with
                UNAVAILABLE (no replica reachable, a replica shutting down or
                behind, the cluster's log without a leader) or with
                RESOURCE_EXHAUSTED from the transport ("Received RST_STREAM
                with error code 11": the server's gRPC memory was full) is
                tried again, with exponential backoff: the time from its
                first attempt after which no new attempt starts. ``0`` or
                ``None``: no retries but gRPC's own (:data:`SERVICE_CONFIG`,
                about 2 s). Inserts and deletes are retried with the same
                request id, so they are applied once; create_filter (only with
                ``if_not_exists``), get_filter, list_filters, lookup, count,
                snapshot and server_info are retried too; drop_filter,
                create_filter without ``if_not_exists`` and health are not.
            read_your_writes: send the largest log position this client has
                seen (:attr:`last_log_position`) as ``min_log_position`` with
                every insert, delete, lookup, count, get_filter and
                list_filters: a replica behind it waits until it has applied
                that far (see the proto). ``False``: never wait (a read may
                then miss this client's latest writes on a lagging replica).
            token: access token for a server with ``--auth-tokens``, sent
                with every call (streams and health checks too) as the
                metadata ``authorization: Bearer TOKEN``, also over a
                plaintext channel. ``None``: the environment variable
                ``CUCKOO_TOKEN`` if set; ``""``: no token.
            tls: connect with TLS, checking the server's certificate against
                the system's CAs, or `ca`.
            ca: the CA certificate(s) the server's certificate must chain to:
                a PEM file's path, or its bytes. Implies `tls`.
            cert: this client's certificate (chain), for mutual TLS, as a
                path or bytes; needs `key`. Implies `tls`.
            key: the private key of `cert`, as a path or bytes.
            server_name: the name the server's certificate is checked against
                instead of the target's host (e.g. for an IP address target).
                Needs TLS.

        Raises:
            ValueError: a limit, the timeout or the retry timeout is not
                positive, a target in a list is not ``host:port``, a token
                is not 1 to 512 of ! to ~, `cert` without `key` or the other
                way round, a PEM source that is not PEM, TLS options with
                `channel` or `server_name` without TLS.
            OSError: a PEM file cannot be read (the message names it).
            CuckooError: ``UNAVAILABLE``, none of the host names of a list
                of targets resolves.
        """
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive or None, not {timeout!r}")
        if retry_timeout is not None and not retry_timeout >= 0:
            raise ValueError(f"retry_timeout must be >= 0 or None, not {retry_timeout!r}")
        for name, value in (("max_batch_keys", max_batch_keys),
                            ("max_batch_bytes", max_batch_bytes)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, not {value!r}")
        if token is None:
            token = os.environ.get("CUCKOO_TOKEN") or ""
        if token:
            validate_token(token)
        # The same tuple with every call: what the server authenticates.
        self._metadata: Optional[Tuple[Tuple[str, str], ...]] = (
            ((AUTHORIZATION_METADATA_KEY, f"Bearer {token}"),) if token else None)
        tls = tls or ca is not None or cert is not None or key is not None
        if (cert is None) != (key is None):
            raise ValueError("cert= needs key= (its private key)" if key is None else
                             "key= needs cert= (its certificate)")
        if server_name is not None and not tls:
            raise ValueError("server_name applies only with TLS: give tls=True or ca=")
        if tls and channel is not None:
            raise ValueError("tls, ca, cert, key and server_name apply to the channel the client "
                             "makes, not to one given with channel=")
        credentials = None
        options = channel_options(max_receive_message_bytes)
        if tls:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem("ca", ca) if ca is not None else None,
                private_key=_read_pem("key", key) if key is not None else None,
                certificate_chain=_read_pem("cert", cert) if cert is not None else None)
            if server_name:
                options.append(("grpc.ssl_target_name_override", server_name))
        self._target = target
        self._timeout = timeout
        self._retry_timeout = retry_timeout or 0.0
        self._read_your_writes = read_your_writes
        self._max_batch_keys = max_batch_keys
        self._max_batch_bytes = max_batch_bytes
        self._position = 0
        self._position_lock = threading.Lock()
        if channel is None:
            self._channel_target = channel_target(target)
            if credentials is not None:
                channel = grpc.secure_channel(self._channel_target, credentials, options=options)
            else:
                channel = grpc.insecure_channel(self._channel_target, options=options)
            self._owns_channel = True
        else:
            self._channel_target = None
            self._owns_channel = False
        self._channel = channel
        self._stub = _pb_grpc.FilterServiceStub(channel)
        self._health_stub: Any = None
        self._limits: Optional[Tuple[int, int]] = None
        self._limits_lock = threading.Lock()
        self._closed = False

    # -- Lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Closes the channel this client made (not one passed in). Idempotent.

        Calls after this raise ValueError.
        """
        if not self._closed:
            self._closed = True
            if self._owns_channel:
                self._channel.close()

    def __enter__(self) -> "Client":
        """Returns the client; the ``with`` block's end closes it."""
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Closes the client (see :meth:`close`)."""
        self.close()

    def __repr__(self) -> str:
        """``Client('host:port')``."""
        return f"Client({self._target!r})"

    @property
    def target(self) -> Union[str, Sequence[str]]:
        """The target given to the constructor."""
        return self._target

    @property
    def channel_target(self) -> Optional[str]:
        """The gRPC target of the channel this client made (e.g. ``"ipv4:a:p,b:p"``
        for a list of servers); ``None`` when given a channel."""
        return self._channel_target

    @property
    def timeout(self) -> Optional[float]:
        """The deadline of each RPC, in seconds (``None``: none)."""
        return self._timeout

    @property
    def retry_timeout(self) -> float:
        """How long an RPC failing with UNAVAILABLE is retried, in seconds (0: not)."""
        return self._retry_timeout

    @property
    def last_log_position(self) -> int:
        """The largest log position this client has seen in a response (0: none yet).

        With ``read_your_writes`` every insert, delete, lookup, count,
        get_filter and list_filters asks the replica to have applied the log
        this far. Setting it replaces it (not only upward): give it another
        client's position to read that client's writes, or 0 to forget it
        (e.g. after the server's data was replaced: a single node answers a
        position past its log with ``OUT_OF_RANGE``).
        """
        with self._position_lock:
            return self._position

    @last_log_position.setter
    def last_log_position(self, position: int) -> None:
        if not isinstance(position, int) or position < 0:
            raise ValueError(f"a log position is an int >= 0, not {position!r}")
        with self._position_lock:
            self._position = position

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel, e.g. to make other stubs on it."""
        return self._channel

    @property
    def stub(self) -> _pb_grpc.FilterServiceStub:
        """The generated ``cuckoo.v1.FilterService`` stub, for calls this class lacks
        (e.g. ``client.stub.Insert.future(request, metadata=client.metadata)``); it
        raises ``grpc.RpcError``."""
        return self._stub

    @property
    def metadata(self) -> Optional[Tuple[Tuple[str, str], ...]]:
        """The metadata every call of this client carries (the token), for calls
        made through :attr:`stub` or :attr:`channel`; ``None`` without a token."""
        return self._metadata

    # -- Filters ---------------------------------------------------------------

    def create_filter(self,
                      name: str,
                      capacity: int,
                      false_positive_rate: Optional[float] = None,
                      fingerprint_bits: Optional[int] = None,
                      bucket_size: Optional[int] = None,
                      shards: Optional[int] = None,
                      max_kicks: Optional[int] = None,
                      seed: Optional[int] = None,
                      if_not_exists: bool = False,
                      semi_sort: Optional[bool] = None,
                      growth_factor: Optional[int] = None,
                      max_capacity: Optional[int] = None) -> FilterInfo:
        """Creates a filter sized for `capacity` keys and returns its info.

        Args left ``None`` take the server's defaults (see
        ``CreateFilterRequest`` in the proto): false-positive rate 0.002,
        4-slot buckets, shards from the capacity, 2000 kicks, a random seed,
        semi-sorted buckets when the rate picks the fingerprint size.

        Args:
            name: a Redis key: 1 to 512 bytes of UTF-8 without NUL
                (``"users:seen"``, ``"my filter"``).
            capacity: keys the filter must hold, 1 to 2**40.
            false_positive_rate: target rate in (0, 1); picks the fingerprint size.
            fingerprint_bits: explicit fingerprint size, 4 to 32; overrides the rate.
            bucket_size: slots per bucket: 2, 4 or 8.
            shards: independent shards, a power of two from 1 to 4096.
            max_kicks: longest eviction chain an insert tries, 1 to 10000.
            seed: hash seed (0 is a seed like any other).
            if_not_exists: if the filter exists with the same settings, return
                it (with ``created=False``) instead of failing.
            semi_sort: ``True`` for semi-sorted buckets (f - 1 bits per slot at
                the false-positive rate of f bits; needs ``bucket_size`` 4 and
                ``fingerprint_bits`` >= 5), ``False`` for packed ones, ``None``
                for the server's choice (semi-sorted when the rate picks 5 to
                16 bits with 4-slot buckets).
            growth_factor: ``None`` or 0 (the default) for a fixed filter
                (inserts past its capacity answer ``FULL``); 2 to 8 for one
                that grows instead: a shard that fills adds a table that many
                times larger, with fingerprints long enough that the
                false-positive rate stays under `false_positive_rate` at any
                size. Off by default because it costs from the first key
                (about 2 to 3 more bits per key than a fixed filter, a bit or
                so more per later generation); not with `fingerprint_bits`.
                Growth is charged to the server's memory budget; while the
                budget is used up, inserts into growing filters raise
                ``RESOURCE_EXHAUSTED`` (nothing is evicted).
            max_capacity: with `growth_factor`, the most keys the filter may
                grow to hold (``FULL`` beyond); more than `capacity`.
                ``None``: as far as it can grow.

        Returns:
            The filter's :class:`FilterInfo`, with ``created`` ``True`` if this
            call made it and ``False`` if ``if_not_exists`` found it (also
            when a retry after a lost response finds the filter the first
            try made: only calls with ``if_not_exists`` are retried).

        Raises:
            CuckooError: ``ALREADY_EXISTS`` (the name is taken, or with other
                settings under `if_not_exists`), ``INVALID_ARGUMENT`` (bad name
                or settings), ``RESOURCE_EXHAUSTED`` (memory budget or filter
                count), or a transport error.
        """
        request = _pb.CreateFilterRequest(name=name, capacity=capacity,
                                          if_not_exists=if_not_exists)
        if false_positive_rate is not None:
            request.false_positive_rate = false_positive_rate
        if fingerprint_bits is not None:
            request.fingerprint_bits = fingerprint_bits
        if bucket_size is not None:
            request.bucket_size = bucket_size
        if shards is not None:
            request.shards = shards
        if max_kicks is not None:
            request.max_kicks = max_kicks
        if seed is not None:
            request.seed = seed
        if semi_sort is not None:
            request.semi_sort = semi_sort
        if growth_factor is not None:
            request.growth_factor = growth_factor
        if max_capacity is not None:
            request.max_capacity = max_capacity
        # Only with if_not_exists is a second try of a create that was
        # applied harmless: without, it would fail with ALREADY_EXISTS.
        response = self._call(self._stub.CreateFilter, request, retry=if_not_exists)
        return FilterInfo.from_proto(response.filter, created=response.created,
                                     log_position=response.log_position)

    def get_filter(self, name: str) -> FilterInfo:
        """The info of filter `name`.

        Raises:
            CuckooError: ``NOT_FOUND`` if there is no such filter,
                ``INVALID_ARGUMENT`` for a bad name.
        """
        response = self._call(self._stub.GetFilter, _pb.GetFilterRequest(
            name=name, min_log_position=self._min_position()))
        return FilterInfo.from_proto(response.filter, log_position=response.log_position)

    def list_filters(self) -> List[FilterInfo]:
        """The info of every filter, sorted by name."""
        response = self._call(self._stub.ListFilters, _pb.ListFiltersRequest(
            min_log_position=self._min_position()))
        return [FilterInfo.from_proto(f, log_position=response.log_position)
                for f in response.filters]

    def drop_filter(self, name: str) -> int:
        """Removes filter `name` and returns the bytes of table memory freed.

        Not retried by the client (only by gRPC, :data:`SERVICE_CONFIG`): a
        second try of a drop that was applied would fail with NOT_FOUND, or
        drop a filter made again under the name meanwhile.
        :attr:`last_log_position` then holds the drop's position.

        Raises:
            CuckooError: ``NOT_FOUND`` if there is no such filter.
        """
        response = self._call(self._stub.DropFilter, _pb.DropFilterRequest(name=name),
                              retry=False)
        return response.freed_bytes

    def set_filter_expiry(self, name: str, expire_at: Optional[datetime.datetime],
                          condition: int = 0) -> _pb.SetFilterExpiryResponse:
        """Sets filter `name`'s expiry to `expire_at` (an aware datetime), or clears it
        (``None``); the server drops the filter then (a logged drop). A time not in the
        future drops it now (``response.dropped``). `condition`:
        ``SetFilterExpiryRequest.Condition`` (Redis 7's NX/XX/GT/LT). Not retried by the
        client (a repeat could drop a filter made again under the name).

        Raises:
            CuckooError: ``NOT_FOUND`` if there is no such filter (or it has expired),
                ``INVALID_ARGUMENT`` for a time out of range.
        """
        request = _pb.SetFilterExpiryRequest(name=name, condition=condition)
        if expire_at is not None:
            request.expire_at.FromDatetime(expire_at)
        return self._call(self._stub.SetFilterExpiry, request, retry=False)

    def rename_filter(self, name: str, new_name: str,
                      replace: bool = False) -> _pb.RenameFilterResponse:
        """Renames filter `name` to `new_name` in one step (Redis's RENAME / RENAMENX).

        With `replace`, a filter named `new_name` is dropped with the rename
        (the response's ``replaced`` and ``replaced_freed_bytes`` say so);
        without it the call fails with ``ALREADY_EXISTS``. Not retried by the
        client, as :meth:`drop_filter`. :attr:`last_log_position` then holds
        the rename's position.

        Raises:
            CuckooError: ``NOT_FOUND`` if there is no filter `name`;
                ``ALREADY_EXISTS``; ``INVALID_ARGUMENT`` for a bad `new_name`.
        """
        return self._call(self._stub.RenameFilter,
                          _pb.RenameFilterRequest(name=name, new_name=new_name,
                                                  replace=replace),
                          retry=False)

    def snapshot(self, filter: str = "", changed_only: bool = False,
                 timeout: Optional[float] = 600.0) -> _pb.SnapshotResponse:
        """Writes snapshots of `filter` (every filter when empty) to the server's disk now.

        Returns once they are fsync'ed, with the ``cuckoo.v1.SnapshotResponse``
        (``files``: filter, path, bytes, items, time, duration each; ``unchanged``;
        total ``bytes``). `timeout` (seconds) replaces the client's deadline: a
        large filter takes a while to write.

        Raises:
            CuckooError: ``NOT_FOUND`` for an unknown filter; ``INTERNAL`` or
                ``RESOURCE_EXHAUSTED`` (disk full) naming the file that could not
                be written.
        """
        return self._call(self._stub.Snapshot,
                          _pb.SnapshotRequest(filter=filter, changed_only=changed_only),
                          timeout=timeout)

    # -- Keys ------------------------------------------------------------------

    def insert(self, filter: str, keys: Iterable[Key], if_absent: bool = False,
               request_id: Optional[str] = None) -> Results[InsertResult]:
        """Adds `keys` to `filter`; returns one :class:`InsertResult` per key, in order.

        Per key: ``INSERTED``, ``ALREADY_PRESENT`` (only with `if_absent`: the
        filter probably holds it already, so it was not added; duplicates in
        one call are handled in order) or ``FULL`` (no room; nothing changed).

        Every request carries a request id, and its retries the same one: the
        server answers a repeat within its dedup window with the first one's
        results instead of applying it again. `request_id` (1 to 128
        characters ``!`` to ``~``; ``None``: a random one) is the id of a
        call sent as one request; a batch split into several sends
        ``f"{request_id}.{i}"`` for its request ``i``. So calling again with
        the same `request_id` and keys (same client settings, within the
        server's dedup window) applies nothing twice either, e.g. after a
        CuckooError.

        Returns:
            The results, a list with ``log_position`` (:class:`Results`).

        Raises:
            CuckooError: ``NOT_FOUND`` unknown filter, ``INVALID_ARGUMENT``
                empty or oversize key; after some requests of a large batch
                were applied, ``applied`` says how many keys they carried.
            TypeError: `keys` is a single str/bytes, or holds other types.
            ValueError: `request_id` is not 1 to 128 characters ``!`` to
                ``~`` (with room for the ``.i`` of a split batch).
        """
        def request(chunk: List[bytes], rid: str, position: int) -> _pb.InsertRequest:
            return _pb.InsertRequest(filter=filter, keys=chunk, if_absent=if_absent,
                                     request_id=rid, min_log_position=position)

        return self._batched(self._stub.Insert, request, keys,
                             lambda r: [InsertResult(x) for x in r.results],
                             write_id=_request_id(request_id))

    def lookup(self, filter: str, keys: Iterable[Key]) -> Results[bool]:
        """Whether each key may be in `filter`, in order.

        ``True`` for every key inserted and not deleted, and for other keys
        with about the filter's false-positive rate; ``False`` means the key
        certainly is not there.

        Returns:
            A list with ``log_position`` (:class:`Results`).

        Raises:
            CuckooError, TypeError: as :meth:`insert`.
        """
        return self._batched(
            self._stub.Lookup,
            lambda chunk, _, position: _pb.LookupRequest(filter=filter, keys=chunk,
                                                         min_log_position=position),
            keys, lambda r: list(r.present))

    def delete(self, filter: str, keys: Iterable[Key],
               request_id: Optional[str] = None) -> Results[DeleteResult]:
        """Removes one copy of each key; returns one :class:`DeleteResult` per key.

        Per key: ``DELETED`` or ``NOT_FOUND``. Only delete keys you inserted:
        deleting one that never was may remove another key's fingerprint.
        `request_id`: as :meth:`insert` (a delete applied twice would remove
        two copies).

        Returns:
            A list with ``log_position`` (:class:`Results`).

        Raises:
            CuckooError, TypeError, ValueError: as :meth:`insert`.
        """
        def request(chunk: List[bytes], rid: str, position: int) -> _pb.DeleteRequest:
            return _pb.DeleteRequest(filter=filter, keys=chunk, request_id=rid,
                                     min_log_position=position)

        return self._batched(self._stub.Delete, request, keys,
                             lambda r: [DeleteResult(x) for x in r.results],
                             write_id=_request_id(request_id))

    def count(self, filter: str, keys: Iterable[Key]) -> Results[int]:
        """An estimate of how many copies of each key `filter` holds, in order.

        Never less than the true count (0 means certainly absent); more when
        other keys share the fingerprint and a bucket.

        Returns:
            A list with ``log_position`` (:class:`Results`).

        Raises:
            CuckooError, TypeError: as :meth:`insert`.
        """
        return self._batched(
            self._stub.Count,
            lambda chunk, _, position: _pb.CountRequest(filter=filter, keys=chunk,
                                                        min_log_position=position),
            keys, lambda r: list(r.counts))

    # -- Server ----------------------------------------------------------------

    # -- Backups ---------------------------------------------------------------

    def export_filter(self, name: str, out: BinaryIO,
                      timeout: Optional[float] = 600.0) -> ExportInfo:
        """Writes filter `name`'s snapshot file to `out` (a binary file object).

        The server streams it while it keeps serving; the bytes are exactly a
        snapshot file (docs/SNAPSHOT_FORMAT.md), which :meth:`import_filter`
        (or ``cuckooctl import``) loads back under any name. Retried on
        ``UNAVAILABLE`` only until the first bytes arrived. `timeout`
        (seconds) is the whole transfer's deadline.

        Raises:
            CuckooError: ``NOT_FOUND`` for an unknown filter; ``UNAVAILABLE``
                if the transfer broke off (what `out` got is incomplete).
        """
        self._check_open()
        request = _pb.ExportFilterRequest(name=name)
        start = time.monotonic()
        give_up = start + self._retry_timeout
        backoff = _RETRY_INITIAL_BACKOFF
        while True:
            first: Optional[_pb.ExportFilterChunk] = None
            received = 0
            try:
                for chunk in self._stub.ExportFilter(request, timeout=timeout,
                                                     metadata=self._metadata):
                    if first is None:
                        first = chunk
                    out.write(chunk.data)
                    received += len(chunk.data)
            except grpc.RpcError as e:
                error = CuckooError.from_rpc_error(e)
                now = time.monotonic()
                if (not _retriable(error) or received > 0
                        or now >= give_up or self._closed):
                    raise error from e
                time.sleep(min(random.uniform(backoff / 2, backoff), give_up - now))
                backoff = min(backoff * 2, _RETRY_MAX_BACKOFF)
                continue
            if first is None:
                raise CuckooError(grpc.StatusCode.INTERNAL,
                                  f"the export of filter {name!r} sent no data")
            if first.total_bytes and received != first.total_bytes:
                raise CuckooError(grpc.StatusCode.DATA_LOSS,
                                  f"the export of filter {name!r} ended after {received} of "
                                  f"{first.total_bytes} bytes")
            self._saw(first)
            return ExportInfo(bytes=received, items=first.items,
                              log_position=first.log_position, filter_id=first.filter_id,
                              filter=FilterInfo.from_proto(first.filter,
                                                           log_position=first.log_position))

    def import_filter(self, name: str, source: BinaryIO,
                      timeout: Optional[float] = 600.0) -> FilterInfo:
        """Creates filter `name` from a snapshot file read from `source` (binary).

        What :meth:`export_filter` wrote, or a ``.cuckoo`` file of a data
        directory; every check of a snapshot loaded at start-up applies. The
        filter is durable before the call returns. Not retried: a second try
        of an import that was applied would fail with ``ALREADY_EXISTS``.

        Raises:
            CuckooError: ``ALREADY_EXISTS`` if `name` is taken;
                ``DATA_LOSS`` / ``INVALID_ARGUMENT`` for a damaged or foreign
                file; ``RESOURCE_EXHAUSTED`` if it does not fit the memory
                budget; ``FAILED_PRECONDITION`` on a cluster replica.
        """
        self._check_open()
        total = 0
        try:
            total = os.fstat(source.fileno()).st_size - source.tell()
        except (AttributeError, OSError, ValueError):
            total = 0  # Not a file: the server takes what arrives.

        def chunks() -> Iterable[_pb.ImportFilterChunk]:
            first = True
            while True:
                data = source.read(_IMPORT_CHUNK_BYTES)
                if not data and not first:
                    return
                yield _pb.ImportFilterChunk(name=name if first else "", data=data or b"",
                                            total_bytes=total if first else 0)
                first = False
                if not data:
                    return

        try:
            response = self._stub.ImportFilter(chunks(), timeout=timeout,
                                                   metadata=self._metadata)
        except grpc.RpcError as e:
            raise CuckooError.from_rpc_error(e) from e
        self._saw(response)
        return FilterInfo.from_proto(response.filter, log_position=response.log_position)

    def server_info(self) -> ServerInfo:
        """The server's version, limits and log (one GetServerInfo call).

        With several replicas, the one the call went to (``cluster.replica_id``).
        """
        return ServerInfo.from_proto(self._call(self._stub.GetServerInfo,
                                                _pb.GetServerInfoRequest()))

    def health(self, service: str = "") -> str:
        """The server's status per the standard gRPC health protocol.

        Args:
            service: ``""`` for the server as a whole, or a service name such
                as ``"cuckoo.v1.FilterService"``.

        Returns:
            ``"SERVING"``, ``"NOT_SERVING"`` (e.g. while shutting down) or
            ``"UNKNOWN"``: of one replica, with several. Not retried: a
            probe answers now.

        Raises:
            CuckooError: ``NOT_FOUND`` for a service the server does not know,
                ``UNAVAILABLE`` when it cannot be reached.
        """
        # Imported here: grpc.health.v1 symbols enter protobuf's default pool
        # only when used, so programs that never call health() may also import
        # grpcio-health-checking's copy of them.
        from cuckoo_client.grpc.health.v1 import health_pb2, health_pb2_grpc

        if self._health_stub is None:
            self._health_stub = health_pb2_grpc.HealthStub(self._channel)
        response = self._call(self._health_stub.Check,
                              health_pb2.HealthCheckRequest(service=service), retry=False)
        try:
            return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        except ValueError:
            return str(response.status)

    # -- Internals -------------------------------------------------------------

    def _check_open(self) -> None:
        """Raises ValueError after close(), like a closed file."""
        if self._closed:
            raise ValueError(f"{self!r} is closed")

    def _min_position(self) -> int:
        """The min_log_position to send: the last position seen, if reading our writes."""
        return self.last_log_position if self._read_your_writes else 0

    def _saw(self, response: Any) -> None:
        """Remembers the response's log position if it is the largest yet."""
        position = getattr(response, "log_position", None)
        if position is None:
            position = getattr(response, "applied_log_position", 0)
        if position:
            with self._position_lock:
                if position > self._position:
                    self._position = position

    def _call(self, rpc: Callable[..., _T], request: Any, *, retry: bool = True,
              timeout: Any = _CLIENT_TIMEOUT) -> _T:
        """Calls `rpc` with the deadline, again on UNAVAILABLE (or
        RESOURCE_EXHAUSTED from the transport, :func:`_retriable`) while
        `retry` and retry_timeout allow; gRPC errors become CuckooError.

        Each attempt has the whole deadline (`timeout`, by default the
        client's) and sends the same `request` (a write: the same request
        id). Not retried: other codes, and an Insert cut short part way
        (its prefix was applied; the error says how much).
        """
        self._check_open()
        if timeout is _CLIENT_TIMEOUT:
            timeout = self._timeout
        start = time.monotonic()
        give_up = start + (self._retry_timeout if retry else 0.0)
        backoff = _RETRY_INITIAL_BACKOFF
        attempts = 0
        while True:
            attempts += 1
            try:
                response = rpc(request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                error = CuckooError.from_rpc_error(e)
                now = time.monotonic()
                if (not _retriable(error) or now >= give_up or self._closed
                        or _CUT_SHORT.search(error.message)):
                    if attempts > 1:
                        error = CuckooError(error.code, f"{error.message} (after {attempts} "
                                            f"attempts in {now - start:.1f} s)")
                    raise error from e
                # Wait at most until the budget's end, and try once more then.
                time.sleep(min(random.uniform(backoff / 2, backoff), give_up - now))
                backoff = min(backoff * 2, _RETRY_MAX_BACKOFF)
                continue
            self._saw(response)
            return response

    def _batch_limits(self) -> Tuple[int, int]:
        """(keys, bytes) per request: the constructor's, else the server's (asked once)."""
        with self._limits_lock:
            if self._limits is None:
                keys, size = self._max_batch_keys, self._max_batch_bytes
                if keys is None or size is None:
                    info = self.server_info()
                    if keys is None:
                        keys = max(1, info.max_batch_keys)
                    if size is None:
                        size = max(1, info.max_message_bytes // 4)
                self._limits = (keys, size)
            return self._limits

    def _batched(self, rpc: Callable[..., Any],
                 make_request: Callable[[List[bytes], str, int], Any],
                 keys: Iterable[Key], results: Callable[[Any], List[_T]],
                 write_id: Optional[str] = None) -> Results[_T]:
        """Sends `keys` in as many requests as the limits need; concatenates results.

        `make_request(keys, request_id, min_log_position)`. `write_id`: the
        request id of a write (request i of several gets ``f"{write_id}.{i}"``);
        ``None`` for a read (request_id "").
        """
        self._check_open()
        encoded = encode_keys(keys)
        if not encoded:
            return Results()
        max_keys, max_bytes = self._batch_limits()
        total = len(encoded)
        runs = split_batches(encoded, max_keys, max_bytes)
        ids = [""] * len(runs)
        if write_id is not None:
            ids = [write_id] if len(runs) == 1 else [f"{write_id}.{i}" for i in range(len(runs))]
            if len(ids[-1]) > _MAX_REQUEST_ID:
                raise ValueError(f"request_id {write_id!r} is too long for a batch of "
                                 f"{len(runs)} requests: {ids[-1]!r} is over {_MAX_REQUEST_ID} "
                                 "characters")
        out: Results[_T] = Results()
        for (begin, end), rid in zip(runs, ids):
            try:
                response = self._call(rpc, make_request(encoded[begin:end], rid,
                                                        self._min_position()),
                                      retry=bool(rid) or write_id is None)
            except CuckooError as e:
                applied = begin
                cut = _CUT_SHORT.search(e.message)
                if cut and int(cut.group(2)) == end - begin:
                    applied = begin + int(cut.group(1))
                message = e.message
                if applied > 0 and end - begin < total:
                    message = f"{message} (the first {applied} of {total} keys were applied)"
                raise CuckooError(e.code, message, applied=applied) from e
            got = results(response)
            if len(got) != end - begin:
                raise CuckooError(
                    grpc.StatusCode.INTERNAL,
                    f"the server returned {len(got)} results for {end - begin} keys "
                    f"(the first {end} of {total} keys were applied)", applied=end)
            out.extend(got)
            out.log_position = max(out.log_position, _response_position(response))
        return out


def _response_position(response: Any) -> int:
    """A response's log_position."""
    return getattr(response, "log_position", 0)


def _request_id(request_id: Optional[str]) -> str:
    """`request_id` checked, or a new random one (a UUID's 32 hex digits) for ``None``."""
    if request_id is None:
        return uuid.uuid4().hex
    if not isinstance(request_id, str):
        raise TypeError(f"request_id must be a str, not {type(request_id).__name__}")
    if not 0 < len(request_id) <= _MAX_REQUEST_ID or not _REQUEST_ID_CHARS.fullmatch(request_id):
        raise ValueError(f"request_id {request_id!r} must be 1 to {_MAX_REQUEST_ID} printable "
                         "ASCII characters, ! to ~")
    return request_id
