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
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import threading
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from cuckoo_client.cuckoo.v1 import filter_service_pb2 as _pb
from cuckoo_client.cuckoo.v1 import filter_service_pb2_grpc as _pb_grpc

#: What a key may be: ``str`` (sent as its UTF-8 bytes) or a bytes-like object.
Key = Union[str, bytes, bytearray, memoryview]

#: The server a :class:`Client` talks to when given no target.
DEFAULT_TARGET = "localhost:50051"

_T = TypeVar("_T")


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
class FilterInfo:
    """A filter's settings and state (``cuckoo.v1.FilterInfo``).

    The fields are the proto's, documented in
    ``proto/cuckoo/v1/filter_service.proto``; ``raw`` is the message itself
    (for fields this class does not copy). ``created`` is set only by
    :meth:`Client.create_filter`: ``True`` when it made the filter, ``False``
    when ``if_not_exists`` returned an existing one; elsewhere it is ``None``.
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
    last_snapshot_time: Optional[datetime.datetime] = None
    created: Optional[bool] = None
    raw: Optional[_pb.FilterInfo] = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, message: _pb.FilterInfo, created: Optional[bool] = None) -> "FilterInfo":
        """The FilterInfo of a ``cuckoo.v1.FilterInfo`` message."""
        when = (message.last_snapshot_time.ToDatetime(tzinfo=datetime.timezone.utc)
                if message.HasField("last_snapshot_time") else None)
        return cls(**_fields_of(cls, message), last_snapshot_time=when, created=created,
                   raw=message)


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """The server's version and limits (``cuckoo.v1.GetServerInfoResponse``).

    ``raw`` is the response message itself.
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
    raw: Optional[_pb.GetServerInfoResponse] = dataclasses.field(
        default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, message: _pb.GetServerInfoResponse) -> "ServerInfo":
        """The ServerInfo of a ``cuckoo.v1.GetServerInfoResponse`` message."""
        return cls(**_fields_of(cls, message), raw=message)


def _fields_of(cls: type, message: Any) -> dict:
    """The values of `cls`'s dataclass fields that `message` has, by name."""
    return {
        f.name: getattr(message, f.name)
        for f in dataclasses.fields(cls)
        if f.name not in ("created", "raw", "last_snapshot_time")
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
    """A client for one cuckood server. Safe to use from several threads.

    Example::

        with cuckoo_client.Client("localhost:50051") as client:
            client.create_filter("users", capacity=1_000_000,
                                 false_positive_rate=0.001, if_not_exists=True)
            client.insert("users", ["alice", b"bob"])   # [INSERTED, INSERTED]
            client.lookup("users", ["alice", "carol"])  # [True, False] (probably)

    Every method raises :class:`CuckooError` when a call fails.
    """

    def __init__(self,
                 target: str = DEFAULT_TARGET,
                 timeout: Optional[float] = 30.0,
                 max_batch_keys: Optional[int] = None,
                 max_batch_bytes: Optional[int] = None,
                 *,
                 channel: Optional[grpc.Channel] = None,
                 max_receive_message_bytes: int = 64 << 20) -> None:
        """Makes a client for the cuckood at `target`.

        Connects lazily: an unreachable server shows as a
        :class:`CuckooError` with code ``UNAVAILABLE`` on the first call.

        Args:
            target: ``"host:port"`` or any gRPC target such as
                ``"dns:///cuckood.svc:50051"``; reached over an insecure
                (plaintext) channel. Ignored when `channel` is given.
            timeout: deadline of each RPC in seconds (a large batch is several
                RPCs, each with this deadline); ``None`` for no deadline.
            max_batch_keys: most keys per request; ``None``: the server's
                ``max_batch_keys``.
            max_batch_bytes: most key bytes per request; ``None``: a quarter
                of the server's ``max_message_bytes`` (a key costs a few bytes
                of framing on top of its own).
            channel: an existing channel to use instead of making one (for TLS,
                interceptors or other options). :meth:`close` leaves it open.
            max_receive_message_bytes: largest response accepted, in bytes
                (for the channel this client makes).

        Raises:
            ValueError: a limit or the timeout is not positive.
        """
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive or None, not {timeout!r}")
        for name, value in (("max_batch_keys", max_batch_keys),
                            ("max_batch_bytes", max_batch_bytes)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, not {value!r}")
        self._target = target
        self._timeout = timeout
        self._max_batch_keys = max_batch_keys
        self._max_batch_bytes = max_batch_bytes
        if channel is None:
            channel = grpc.insecure_channel(
                target, options=[("grpc.max_receive_message_length", max_receive_message_bytes)])
            self._owns_channel = True
        else:
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
    def target(self) -> str:
        """The target given to the constructor."""
        return self._target

    @property
    def timeout(self) -> Optional[float]:
        """The deadline of each RPC, in seconds (``None``: none)."""
        return self._timeout

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel, e.g. to make other stubs on it."""
        return self._channel

    @property
    def stub(self) -> _pb_grpc.FilterServiceStub:
        """The generated ``cuckoo.v1.FilterService`` stub, for calls this class lacks
        (e.g. ``client.stub.Insert.future(request)``); it raises ``grpc.RpcError``."""
        return self._stub

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
                      semi_sort: Optional[bool] = None) -> FilterInfo:
        """Creates a filter sized for `capacity` keys and returns its info.

        Args left ``None`` take the server's defaults (see
        ``CreateFilterRequest`` in the proto): false-positive rate 0.002,
        4-slot buckets, shards from the capacity, 2000 kicks, a random seed,
        semi-sorted buckets when the rate picks the fingerprint size.

        Args:
            name: 1 to 128 characters from ``A-Z a-z 0-9 . _ -``, starting
                with a letter or digit.
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

        Returns:
            The filter's :class:`FilterInfo`, with ``created`` ``True`` if this
            call made it and ``False`` if ``if_not_exists`` found it.

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
        response = self._call(self._stub.CreateFilter, request)
        return FilterInfo.from_proto(response.filter, created=response.created)

    def get_filter(self, name: str) -> FilterInfo:
        """The info of filter `name`.

        Raises:
            CuckooError: ``NOT_FOUND`` if there is no such filter,
                ``INVALID_ARGUMENT`` for a bad name.
        """
        response = self._call(self._stub.GetFilter, _pb.GetFilterRequest(name=name))
        return FilterInfo.from_proto(response.filter)

    def list_filters(self) -> List[FilterInfo]:
        """The info of every filter, sorted by name."""
        response = self._call(self._stub.ListFilters, _pb.ListFiltersRequest())
        return [FilterInfo.from_proto(f) for f in response.filters]

    def drop_filter(self, name: str) -> int:
        """Removes filter `name` and returns the bytes of table memory freed.

        Raises:
            CuckooError: ``NOT_FOUND`` if there is no such filter.
        """
        response = self._call(self._stub.DropFilter, _pb.DropFilterRequest(name=name))
        return response.freed_bytes

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
        self._check_open()
        request = _pb.SnapshotRequest(filter=filter, changed_only=changed_only)
        try:
            return self._stub.Snapshot(request, timeout=timeout)
        except grpc.RpcError as e:
            raise CuckooError.from_rpc_error(e) from e

    # -- Keys ------------------------------------------------------------------

    def insert(self, filter: str, keys: Iterable[Key],
               if_absent: bool = False) -> List[InsertResult]:
        """Adds `keys` to `filter`; returns one :class:`InsertResult` per key, in order.

        Per key: ``INSERTED``, ``ALREADY_PRESENT`` (only with `if_absent`: the
        filter probably holds it already, so it was not added; duplicates in
        one call are handled in order) or ``FULL`` (no room; nothing changed).

        Raises:
            CuckooError: ``NOT_FOUND`` unknown filter, ``INVALID_ARGUMENT``
                empty or oversize key; after some requests of a large batch
                were applied, ``applied`` says how many keys they carried.
            TypeError: `keys` is a single str/bytes, or holds other types.
        """
        def request(chunk: List[bytes]) -> _pb.InsertRequest:
            return _pb.InsertRequest(filter=filter, keys=chunk, if_absent=if_absent)

        return self._batched(self._stub.Insert, request, keys,
                             lambda r: [InsertResult(x) for x in r.results])

    def lookup(self, filter: str, keys: Iterable[Key]) -> List[bool]:
        """Whether each key may be in `filter`, in order.

        ``True`` for every key inserted and not deleted, and for other keys
        with about the filter's false-positive rate; ``False`` means the key
        certainly is not there.

        Raises:
            CuckooError, TypeError: as :meth:`insert`.
        """
        return self._batched(self._stub.Lookup,
                             lambda chunk: _pb.LookupRequest(filter=filter, keys=chunk), keys,
                             lambda r: list(r.present))

    def delete(self, filter: str, keys: Iterable[Key]) -> List[DeleteResult]:
        """Removes one copy of each key; returns one :class:`DeleteResult` per key.

        Per key: ``DELETED`` or ``NOT_FOUND``. Only delete keys you inserted:
        deleting one that never was may remove another key's fingerprint.

        Raises:
            CuckooError, TypeError: as :meth:`insert`.
        """
        return self._batched(self._stub.Delete,
                             lambda chunk: _pb.DeleteRequest(filter=filter, keys=chunk), keys,
                             lambda r: [DeleteResult(x) for x in r.results])

    def count(self, filter: str, keys: Iterable[Key]) -> List[int]:
        """An estimate of how many copies of each key `filter` holds, in order.

        Never less than the true count (0 means certainly absent); more when
        other keys share the fingerprint and a bucket.

        Raises:
            CuckooError, TypeError: as :meth:`insert`.
        """
        return self._batched(self._stub.Count,
                             lambda chunk: _pb.CountRequest(filter=filter, keys=chunk), keys,
                             lambda r: list(r.counts))

    # -- Server ----------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """The server's version and limits (one GetServerInfo call)."""
        return ServerInfo.from_proto(self._call(self._stub.GetServerInfo,
                                                _pb.GetServerInfoRequest()))

    def health(self, service: str = "") -> str:
        """The server's status per the standard gRPC health protocol.

        Args:
            service: ``""`` for the server as a whole, or a service name such
                as ``"cuckoo.v1.FilterService"``.

        Returns:
            ``"SERVING"``, ``"NOT_SERVING"`` (e.g. while shutting down) or
            ``"UNKNOWN"``.

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
                              health_pb2.HealthCheckRequest(service=service))
        try:
            return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        except ValueError:
            return str(response.status)

    # -- Internals -------------------------------------------------------------

    def _check_open(self) -> None:
        """Raises ValueError after close(), like a closed file."""
        if self._closed:
            raise ValueError(f"{self!r} is closed")

    def _call(self, rpc: Callable[..., _T], request: Any) -> _T:
        """Calls `rpc` with the deadline; gRPC errors become CuckooError."""
        self._check_open()
        try:
            return rpc(request, timeout=self._timeout)
        except grpc.RpcError as e:
            raise CuckooError.from_rpc_error(e) from e

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

    def _batched(self, rpc: Callable[..., Any], make_request: Callable[[List[bytes]], Any],
                 keys: Iterable[Key], results: Callable[[Any], List[_T]]) -> List[_T]:
        """Sends `keys` in as many requests as the limits need; concatenates results."""
        self._check_open()
        encoded = encode_keys(keys)
        if not encoded:
            return []
        max_keys, max_bytes = self._batch_limits()
        total = len(encoded)
        out: List[_T] = []
        for begin, end in split_batches(encoded, max_keys, max_bytes):
            try:
                response = rpc(make_request(encoded[begin:end]), timeout=self._timeout)
            except grpc.RpcError as e:
                error = CuckooError.from_rpc_error(e)
                if begin > 0:
                    error = CuckooError(
                        error.code,
                        f"{error.message} (the first {begin} of {total} keys were applied)",
                        applied=begin)
                raise error from e
            got = results(response)
            if len(got) != end - begin:
                raise CuckooError(
                    grpc.StatusCode.INTERNAL,
                    f"the server returned {len(got)} results for {end - begin} keys "
                    f"(the first {end} of {total} keys were applied)", applied=end)
            out.extend(got)
        return out
