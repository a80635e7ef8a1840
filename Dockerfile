# cuckood: the gRPC server of named cuckoo filters, plus cuckooctl; RedisBloom's
# CF.* commands on the Redis port (6379) too.
#
#   docker build -t cuckood:0.1.0 .
#   docker run -d --name cuckood -p 50051:50051 -p 9090:9090 -p 6379:6379 -v cuckood-data:/var/lib/cuckood cuckood
#   docker exec cuckood cuckooctl create users --capacity=1M
#   redis-cli -p 6379 CF.EXISTS users alice
#   docker stop -t 60 cuckood      # SIGTERM: drain, final snapshot, exit 0
#
# Configuration: CUCKOOD_* environment variables or flags after the image name
# (server/README.md lists them). Data lives in /var/lib/cuckood (a volume).
# The Redis port has no TLS: with TLS on (CUCKOOD_TLS_CERT) cuckood refuses to
# start unless CUCKOOD_REDIS_PLAINTEXT=true or CUCKOOD_REDIS_LISTEN= (empty).
# More in deploy/README.md.

# BINARIES: where the two binaries come from. Empty or "source" (the
# default): compiled here from the source, stage build. "prebuilt": taken
# from the build context's build/image/ (cuckood and cuckooctl, built on a
# Debian bookworm host; scripts/container-test.sh puts the release build's
# there, stripped, so CI does not compile them a second time), stage
# binaries-prebuilt. Either way the stage binaries finds their runtime
# packages and the runtime stage is the same. The engine builds only the
# stages the chosen one needs (BuildKit; podman/buildah skip unused stages).
# (${BINARIES:-source}, not ARG BINARIES=source: podman 4.3 picks the stages
# to build before it applies an ARG's default.)
ARG BINARIES

# ---------------------------------------------------------------- build
# Builds only the two binaries: no tests, no benchmarks (so no GoogleTest or
# Google Benchmark either). python3-grpcio is here only because configuring
# client/ checks the Python client package's generator; nothing Python is built.
FROM debian:bookworm AS toolchain
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libabsl-dev libxxhash-dev libspdlog-dev libboost-dev prometheus-cpp-dev \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libnats-dev libssl-dev \
      python3 python3-grpcio \
 && rm -rf /var/lib/apt/lists/*

SHELL ["/bin/bash", "-euo", "pipefail", "-c"]

FROM toolchain AS build
WORKDIR /src
# Only what the two binaries are built from, so edits to tests/, bench/ or docs/
# keep this layer's cache.
COPY CMakeLists.txt ./
COPY cmake cmake
COPY proto proto
COPY base base
COPY core core
COPY server server
COPY client client
# Release: the same -O3 -DNDEBUG code as the RelWithDebInfo default, without
# debug info: ~30% less compile time, and 3 MB of binaries instead of 33 MB.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCUCKOO_BUILD_TESTS=OFF -DCUCKOO_BUILD_BENCH=OFF >/dev/null \
 && ninja -C build -j"$(nproc)" cuckood cuckooctl \
 && install -D -m 0755 -t /out/bin build/server/cuckood build/client/cuckooctl

FROM build AS binaries-source

# The toolchain stage has every library the binaries link, for the package
# discovery below.
FROM toolchain AS binaries-prebuilt
COPY build/image/cuckood build/image/cuckooctl /out/bin/

FROM binaries-${BINARIES:-source} AS binaries
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
# The runtime stage installs exactly the Debian packages that own the shared
# libraries the binaries load (libgrpc++1.51, libprotobuf32, libabsl20220623,
# libspdlog1.10, libfmt9, ...), found here with ldd + dpkg, so a library added
# to the build cannot be forgotten there.
RUN if ldd /out/bin/* | grep -F 'not found'; then exit 1; fi; \
    for lib in $(ldd /out/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do \
      pkg=; \
      for path in "$lib" "/usr$lib" "$(readlink -f "$lib")"; do \
        pkg=$(dpkg-query -S "$path" 2>/dev/null | head -n 1 | cut -d: -f1) && [ -n "$pkg" ] && break; \
      done; \
      [ -n "$pkg" ] || { echo "no Debian package owns $lib" >&2; exit 1; }; \
      echo "$pkg"; \
    done | sort -u >/out/runtime-packages \
 && echo "runtime packages:" $(cat /out/runtime-packages)

# ---------------------------------------------------------------- runtime
FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=binaries /out/runtime-packages /usr/share/cuckood/runtime-packages
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(cat /usr/share/cuckood/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 cuckood \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/cuckood \
      --shell /usr/sbin/nologin cuckood \
 && mkdir -p /var/lib/cuckood \
 && chown 10001:10001 /var/lib/cuckood \
 && chmod 0750 /var/lib/cuckood
COPY --from=binaries /out/bin/cuckood /out/bin/cuckooctl /usr/local/bin/

# VERSION: the CMake project's (CMakeLists.txt; this default is checked equal
# to it by scripts/set-version.py --check, which CI runs); REVISION: the git
# commit; SOURCE: where the source is published; CREATED: the commit's time
# in UTC, RFC 3339 (the commit's, not the build's, so a rebuild of a commit
# labels the same). scripts/container-test.sh passes all four, as the
# release steps of docs/RELEASING.md do.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=unknown
ARG CREATED=
LABEL org.opencontainers.image.title="cuckood" \
      org.opencontainers.image.description="gRPC server of named cuckoo filters (batched insert/lookup/delete/count), with cuckooctl; RedisBloom's CF.* commands on port 6379" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.created="${CREATED}"

# A new named volume starts as a copy of this directory, owned by 10001:10001,
# so `-v NAME:/var/lib/cuckood` is writable with no extra step. A bind mount
# must be writable by uid 10001 (or run with --user).
ENV CUCKOOD_DATA_DIR=/var/lib/cuckood
VOLUME ["/var/lib/cuckood"]
WORKDIR /var/lib/cuckood
USER 10001:10001
# The Redis port is on in the image (the flag's default is off), so that
# clients written for Redis + RedisBloom need only the address changed. It
# has no TLS: with CUCKOOD_TLS_CERT set, cuckood refuses to start until
# CUCKOOD_REDIS_PLAINTEXT=true says plaintext is meant there (a private
# network, a port published on 127.0.0.1 only), or CUCKOOD_REDIS_LISTEN=
# (empty) turns it off. docs/REDIS_COMPATIBILITY.md.
ENV CUCKOOD_REDIS_LISTEN=0.0.0.0:6379
# 50051: gRPC (cuckoo.v1.FilterService, grpc.health.v1, reflection).
# 9090: admin HTTP (/metrics, /healthz, /readyz).
# 6379: Redis protocol (RESP2/RESP3: RedisBloom's CF.* commands).
EXPOSE 50051 9090 6379

# Healthy once every snapshot is loaded and gRPC serves; NOT_SERVING (unhealthy)
# while draining on shutdown. The start period covers loading large snapshots.
# It asks localhost:50051 (or $CUCKOO_TARGET): if you move the gRPC port with
# CUCKOOD_LISTEN, set CUCKOO_TARGET=127.0.0.1:PORT too.
# With TLS on (CUCKOOD_TLS_CERT set) it must speak TLS and check the
# certificate for the name localhost ($CUCKOO_TLS_SERVER_NAME otherwise)
# against a CA: $CUCKOO_CA if set, else ca.crt beside the certificate (as in
# a Kubernetes Secret from cert-manager, or deploy/k8s/components/mtls's),
# else the certificate itself (self-signed). With mutual TLS it presents the
# server's own certificate (which must then allow clientAuth), unless
# CUCKOO_CERT/CUCKOO_KEY say otherwise. Health needs no token. Not the Redis
# port: it may be turned off, and it serves the same filters as gRPC. A shell
# (dash) for that; cuckood itself stays PID 1 (ENTRYPOINT, exec form).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5m --retries=3 \
  CMD if [ -n "$CUCKOOD_TLS_CERT" ]; then \
        ca=${CUCKOO_CA:-${CUCKOOD_TLS_CERT%/*}/ca.crt}; \
        [ -n "$CUCKOO_CA" ] || [ -r "$ca" ] || ca=$CUCKOOD_TLS_CERT; \
        set -- --ca="$ca" --tls-server-name="${CUCKOO_TLS_SERVER_NAME:-localhost}"; \
        if [ -n "$CUCKOOD_TLS_CLIENT_CA" ] && [ -z "$CUCKOO_CERT" ]; then \
          set -- "$@" --cert="$CUCKOOD_TLS_CERT" --key="$CUCKOOD_TLS_KEY"; \
        fi; \
      fi; \
      exec cuckooctl health --quiet --timeout=2s "$@"

# cuckood is PID 1 (exec form, no shell) and handles SIGTERM itself: it drains
# calls in flight (--drain-timeout, 10s), writes a final snapshot of every
# changed filter and exits 0. `docker stop` sends SIGKILL after 10 s by
# default, which can cut the final snapshot short: use `docker stop -t 60`
# (compose: stop_grace_period; Kubernetes: terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/cuckood"]
