"""The Python client's token and TLS options against an in-process fake server.

Run by tests/client/CMakeLists.txt (python_security_check) with
PYTHONPATH=<build>/python; needs no cuckood. Checks that every call kind
(unary, the limits' GetServerInfo, both streams, health) sends
``authorization: Bearer TOKEN``, that CUCKOO_TOKEN is the default, and the
argument errors.
"""
import io
import os
import sys
import tempfile
import threading
from concurrent import futures

import grpc

import cuckoo_client
from cuckoo_client.cuckoo.v1 import filter_service_pb2 as pb
from cuckoo_client.cuckoo.v1 import filter_service_pb2_grpc as pb_grpc

seen = []  # (method, authorization value or None)
lock = threading.Lock()


def record(method, context):
    value = dict(context.invocation_metadata()).get("authorization")
    with lock:
        seen.append((method, value))


class Fake(pb_grpc.FilterServiceServicer):
    def GetServerInfo(self, request, context):
        record("GetServerInfo", context)
        return pb.GetServerInfoResponse(max_batch_keys=10, max_message_bytes=1 << 20)

    def Lookup(self, request, context):
        record("Lookup", context)
        return pb.LookupResponse(present=[True] * len(request.keys))

    def ExportFilter(self, request, context):
        record("ExportFilter", context)
        yield pb.ExportFilterChunk(total_bytes=3, data=b"abc")

    def ImportFilter(self, request_iterator, context):
        record("ImportFilter", context)
        n = sum(len(c.data) for c in request_iterator)
        return pb.ImportFilterResponse(bytes=n)


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_FilterServiceServicer_to_server(Fake(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"127.0.0.1:{port}"
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    def every_call(client):
        seen.clear()
        client.lookup("f", [f"k{i}" for i in range(25)])  # GetServerInfo + 3 Lookups.
        client.export_filter("f", io.BytesIO())
        client.import_filter("g", io.BytesIO(b"snapshot"))
        return list(seen)

    os.environ.pop("CUCKOO_TOKEN", None)
    with cuckoo_client.Client(target, token="ck_py", retry_timeout=0) as c:
        calls = every_call(c)
    check(sorted({m for m, _ in calls}) == ["ExportFilter", "GetServerInfo", "ImportFilter",
                                             "Lookup"], f"every call kind was made: {calls}")
    check(len(calls) == 6 and all(v == "Bearer ck_py" for _, v in calls),
          f"every call carries the token: {calls}")

    os.environ["CUCKOO_TOKEN"] = "ck_from_env"
    with cuckoo_client.Client(target, retry_timeout=0) as c:
        calls = every_call(c)
    check(all(v == "Bearer ck_from_env" for _, v in calls), f"CUCKOO_TOKEN is the default: {calls}")
    with cuckoo_client.Client(target, token="", retry_timeout=0) as c:
        calls = every_call(c)
    check(all(v is None for _, v in calls), f"token='' sends none despite CUCKOO_TOKEN: {calls}")
    del os.environ["CUCKOO_TOKEN"]

    def raises(exc, what, **kwargs):
        try:
            cuckoo_client.Client(target, **kwargs).close()
        except exc as e:
            check(True, f"{what}: {type(e).__name__}: {e}")
            return str(e)
        check(False, f"{what}: no {exc.__name__}")
        return ""

    raises(ValueError, "a token with a space", token="a b")
    raises(ValueError, "a token of 513 characters", token="x" * 513)
    raises(ValueError, "cert without key", cert=b"-----BEGIN CERTIFICATE-----")
    raises(ValueError, "server_name without TLS", server_name="cuckood.test")
    message = raises(FileNotFoundError, "a missing CA file", ca="/nonexistent/ca.pem")
    check("/nonexistent/ca.pem" in message, "the error names the file")
    with tempfile.NamedTemporaryFile(suffix=".pem") as f:
        f.write(b"not a certificate")
        f.flush()
        raises(ValueError, "a CA file that is not PEM", ca=f.name)
    raises(ValueError, "TLS options with channel=", ca=b"-----BEGIN CERTIFICATE-----",
           channel=grpc.insecure_channel(target))
    # TLS to a plaintext server: the handshake fails, UNAVAILABLE.
    with cuckoo_client.Client(target, tls=True, retry_timeout=0, timeout=5) as c:
        try:
            c.server_info()
            check(False, "TLS against a plaintext server fails")
        except cuckoo_client.CuckooError as e:
            check(e.code == grpc.StatusCode.UNAVAILABLE, f"TLS to plaintext: {e}")
    server.stop(0)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
