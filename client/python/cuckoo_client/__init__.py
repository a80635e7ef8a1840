"""cuckoo_client: the Python client of cuckood, a server of named cuckoo filters.

Install the wheel ``cuckoo_client-<version>-py3-none-any.whl`` (the CMake target
``cuckoo_python_wheel`` writes it into ``build/release/python/dist``) with pip,
or put ``build/release/python`` on ``PYTHONPATH``; see ``client/python/README.md``.

    import cuckoo_client

    with cuckoo_client.Client("localhost:50051") as client:
        client.create_filter("users", capacity=1_000_000, false_positive_rate=0.001,
                             if_not_exists=True)
        client.insert("users", ["alice", b"bob"])      # [InsertResult.INSERTED, ...]
        client.lookup("users", ["alice", "mallory"])   # [True, False] (probably)

What is here:

* :class:`Client` -- the wrapper: create_filter, get_filter, list_filters,
  drop_filter, insert, lookup, delete, count, snapshot, server_info, health.
* :class:`CuckooError` -- raised for every failed call (``.code``, ``.message``,
  ``.applied``).
* :class:`InsertResult`, :class:`DeleteResult` -- per-key results.
* :class:`FilterInfo`, :class:`ServerInfo`, :class:`ClusterInfo` -- what the
  info calls return; :class:`Results` -- the per-key results' list, with its
  ``log_position``.
* :func:`channel_target`, :func:`channel_options`, :data:`SERVICE_CONFIG` --
  how a Client makes its channel (several replicas, round_robin, retries).
* ``filter_service_pb2`` / ``filter_service_pb2_grpc`` -- the generated
  ``cuckoo.v1`` messages and stub (also as ``cuckoo_client.cuckoo.v1.*``); the
  health protocol's are ``cuckoo_client.grpc.health.v1.health_pb2{,_grpc}``.
"""

try:
    from cuckoo_client._version import __version__
except ImportError as _error:
    # This is client/python/cuckoo_client, the wrapper's source: the build
    # adds _version.py and the generated modules.
    raise ImportError(
        f"{__path__[0]} is the source of cuckoo_client, not the built package: install the "
        "wheel (CMake target cuckoo_python_wheel), or build the target cuckoo_python and put "
        "<build dir>/python on PYTHONPATH (and do not run Python from client/python, whose "
        "cuckoo_client shadows it)") from _error
from cuckoo_client.client import (
    AUTHORIZATION_METADATA_KEY,
    DEFAULT_TARGET,
    SERVICE_CONFIG,
    Client,
    ClusterInfo,
    CuckooError,
    DeleteResult,
    ExportInfo,
    FilterInfo,
    Generation,
    InsertResult,
    Key,
    Results,
    ServerInfo,
    channel_options,
    channel_target,
    encode_keys,
    split_batches,
    validate_token,
)
from cuckoo_client.cuckoo.v1 import filter_service_pb2, filter_service_pb2_grpc

__all__ = [
    "AUTHORIZATION_METADATA_KEY",
    "DEFAULT_TARGET",
    "SERVICE_CONFIG",
    "Client",
    "ClusterInfo",
    "CuckooError",
    "DeleteResult",
    "ExportInfo",
    "FilterInfo",
    "Generation",
    "InsertResult",
    "Key",
    "Results",
    "ServerInfo",
    "__version__",
    "channel_options",
    "channel_target",
    "encode_keys",
    "filter_service_pb2",
    "filter_service_pb2_grpc",
    "split_batches",
    "validate_token",
]
