#!/usr/bin/env bash
# Builds a Dockerfile and runs the image with no registry, then checks it from
# outside (scripts/container-test.sh calls it; it can serve any image):
#   scripts/container-smoke.sh DOCKERFILE CONTEXT IMAGE VERIFY_COMMAND
#
#   1. The engine: $CONTAINER_ENGINE if set (podman or docker), else docker if
#      a Docker daemon answers, else Debian's podman (installed if missing,
#      with runc). Podman runs with a private containers.conf in the cache
#      (runc with cgroupfs, which works on cgroup v1, v2 and hybrid hosts, and
#      no default ulimits, so a sandbox without CAP_SYS_RESOURCE can start
#      containers); nothing of the host's own podman setup changes.
#   2. The base images: every FROM of the Dockerfile that is not a stage of
#      it must exist locally. debian:bookworm and debian:bookworm-slim are
#      made from Debian's archive with mmdebstrap (minbase, the host's own
#      apt sources) and imported under the names a registry would give them,
#      so a build never contacts a registry (--pull=never); the tarball is
#      cached for $BASE_MAX_AGE_DAYS days (7). Other bases must be there
#      already: the script says which is missing.
#   3. The build: `ENGINE build --pull=never --format docker` (Docker's
#      format keeps the HEALTHCHECK), with $BUILD_ARGS (e.g. "--build-arg
#      VERSION=1.0"); layers are cached by the engine between runs. Every
#      KEY=VALUE of $SMOKE_LABELS must be a label of the image.
#   4. The run: `ENGINE run -d $RUN_ARGS IMAGE`, then VERIFY_COMMAND (run by
#      bash, with $SMOKE_ENGINE and $SMOKE_CONTAINER set) once a second until
#      it exits 0, for up to $VERIFY_TIMEOUT seconds (120). A container that
#      exits meanwhile fails the smoke test with its logs. The verify command
#      may stop and start the container; it must leave it running.
#   5. The image's HEALTHCHECK, run in the container: it must pass (podman
#      runs it on demand; Docker's schedule is waited for, up to 60 s). An
#      image without one fails unless SMOKE_NO_HEALTHCHECK=1.
#   6. SIGTERM (`ENGINE stop -t 60`): the container must be gone within 3 s,
#      and with SMOKE_REQUIRE_SIGTERM=1 exit with code 0.
# On any failure it prints what failed and the container's last log lines,
# removes its containers and exits 1. Environment: CONTAINER_SMOKE_CACHE (the
# cache, default /var/tmp/container-smoke).
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 DOCKERFILE CONTEXT IMAGE VERIFY_COMMAND" >&2; exit 2; }
dockerfile=$1 context=$2 image=$3 verify=$4
cache=${CONTAINER_SMOKE_CACHE:-/var/tmp/container-smoke}
verify_timeout=${VERIFY_TIMEOUT:-120}
max_age=${BASE_MAX_AGE_DAYS:-7}
smoke=cuckoo-smoke-$$
mkdir -p "$cache"

say() { echo "container-smoke: $*"; }
die() { echo "container-smoke: FAILED: $*" >&2; exit 1; }
# apt_install PACKAGE...: Debian's packages, quietly (the output if it fails).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  say "installing $*"
  apt-get install -y -qq --no-install-recommends "$@" >"$cache/apt.log" 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >"$cache/apt.log" 2>&1; } ||
    { cat "$cache/apt.log" >&2; die "apt-get install $*"; }
}

# ------------------------------------------------------------------ 1. engine
engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=podman
  fi
fi
case "$engine" in
  podman)
    command -v podman >/dev/null && command -v runc >/dev/null || apt_install podman runc
    mkdir -p "$cache/podman"
    cat >"$cache/podman/containers.conf" <<'EOF'
# Written by scripts/container-smoke.sh: runc with cgroupfs starts containers
# on cgroup v1, v2 and hybrid hosts (crun refuses hybrid ones), and no
# default ulimits (raising them needs CAP_SYS_RESOURCE, which a sandbox may
# not have).
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    export CONTAINERS_CONF=$cache/podman/containers.conf
    ;;
  docker) timeout 10 docker info >/dev/null 2>&1 || die "CONTAINER_ENGINE=docker, but no Docker daemon answers" ;;
  *) die "CONTAINER_ENGINE=$engine: podman or docker" ;;
esac
say "engine: $engine ($("$engine" --version))"

cleanup() { "$engine" rm -f -t 0 "$smoke" >/dev/null 2>&1 || true; }
trap cleanup EXIT
# fail WHAT: the message and the container's last log lines, then exit 1.
fail() {
  {
    echo "container-smoke: FAILED: $*"
    if "$engine" container exists "$smoke" 2>/dev/null || "$engine" inspect "$smoke" >/dev/null 2>&1; then
      echo "container-smoke: last log lines of $smoke:"
      "$engine" logs "$smoke" 2>&1 | tail -n 40
    fi
  } >&2
  exit 1
}

# ------------------------------------------------------------ 2. base images
# The sources mmdebstrap uses: the host's Debian entries (so it works wherever
# the host's apt does), else Debian's own mirror.
debian_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && grep -qE '^[^#]*debian' "$f" && echo "$f"
  done
  return 0
}
# base_tarball SUITE: a minbase root file system of SUITE, made once per
# $max_age days; prints its path.
base_tarball() {
  local tar=$cache/base/$1.tar sources
  if [ -s "$tar" ] && [ -z "$(find "$tar" -mtime "+$max_age")" ]; then
    echo "$tar"
    return 0
  fi
  command -v mmdebstrap >/dev/null || apt_install mmdebstrap >&2
  mkdir -p "$cache/base"
  mapfile -t sources < <(debian_sources)
  [ ${#sources[@]} -gt 0 ] || sources=(http://deb.debian.org/debian)
  say "making the $1 base image with mmdebstrap from ${sources[*]}" >&2
  mmdebstrap --variant=minbase --format=tar --quiet "$1" "$tar.tmp" "${sources[@]}" </dev/null >&2 ||
    die "mmdebstrap $1 failed"
  mv "$tar.tmp" "$tar"
  echo "$tar"
}
# The FROM images that are not stages of the Dockerfile itself. A FROM with
# a build argument in it (FROM binaries-${BINARIES:-source}) picks one of
# the stages.
mapfile -t bases < <(awk 'toupper($1) == "FROM" {
    img = ""; for (i = 2; i <= NF; i++) if ($i !~ /^--/) { img = $i; break }
    if (tolower($(NF - 1)) == "as") stage[tolower($NF)] = 1
    if (!(tolower(img) in stage) && img !~ /\$/) print img }' "$dockerfile" | sort -u)
for base in "${bases[@]}"; do
  # Names as the engines store them: docker.io/library/NAME for official images.
  case "$base" in
    */*) full=$base ;;
    *) full=docker.io/library/$base ;;
  esac
  "$engine" image inspect "$full" >/dev/null 2>&1 && continue
  case "$base" in
    debian:bookworm | debian:bookworm-slim) suite=bookworm ;;
    *) die "the base image $base is not there, and this script makes only debian:bookworm(-slim)" ;;
  esac
  tar=$(base_tarball "$suite")
  "$engine" import --quiet "$tar" "$full" >/dev/null || die "$engine import $tar as $full"
  say "base image $full imported from $tar"
done

# ------------------------------------------------------------------ 3. build
t0=$SECONDS
read -r -a build_args <<<"${BUILD_ARGS:-}"
build_opts=(--pull=never)
[ "$engine" = podman ] && build_opts+=(--format docker)
"$engine" build "${build_opts[@]}" "${build_args[@]}" -f "$dockerfile" -t "$image" "$context" \
  >"$cache/build.log" 2>&1 || { tail -n 60 "$cache/build.log" >&2; die "$engine build of $dockerfile"; }
say "built $image in $((SECONDS - t0))s"
# SMOKE_LABELS="KEY=VALUE ...": labels the image must carry, exactly.
for want in ${SMOKE_LABELS:-}; do
  got=$("$engine" image inspect -f "{{index .Config.Labels \"${want%%=*}\"}}" "$image") ||
    die "$engine image inspect $image"
  [ "$got" = "${want#*=}" ] || die "$image: label ${want%%=*} is '$got', not '${want#*=}'"
done
[ -z "${SMOKE_LABELS:-}" ] || say "labels as expected: $(echo $SMOKE_LABELS)"

# -------------------------------------------------------------------- 4. run
read -r -a run_args <<<"${RUN_ARGS:-}"
"$engine" rm -f -t 0 "$smoke" >/dev/null 2>&1 || true
"$engine" run -d --name "$smoke" "${run_args[@]}" "$image" >/dev/null || fail "$engine run $image"
say "running $image as $smoke; verifying (up to ${verify_timeout}s)"
export SMOKE_ENGINE=$engine SMOKE_CONTAINER=$smoke
t0=$SECONDS
while :; do
  if bash -c "$verify" >"$cache/verify.log" 2>&1; then
    cat "$cache/verify.log"
    break
  fi
  if [ "$("$engine" inspect -f '{{.State.Running}}' "$smoke" 2>/dev/null)" != true ]; then
    cat "$cache/verify.log" >&2
    fail "$smoke is not running (exit code $("$engine" inspect -f '{{.State.ExitCode}}' "$smoke" 2>/dev/null))"
  fi
  if [ $((SECONDS - t0)) -ge "$verify_timeout" ]; then
    cat "$cache/verify.log" >&2
    fail "'$verify' did not pass within ${verify_timeout}s"
  fi
  sleep 1
done
say "verified in $((SECONDS - t0))s"

# ------------------------------------------------------------ 5. healthcheck
# (podman's image data has it at the top, Docker's under Config.)
hc_field=.Config.Healthcheck
[ "$engine" = podman ] && hc_field=.HealthCheck
if [ "$("$engine" image inspect -f "{{if $hc_field}}yes{{end}}" "$image")" != yes ]; then
  [ "${SMOKE_NO_HEALTHCHECK:-0}" = 1 ] || fail "$image has no HEALTHCHECK"
elif [ "$engine" = podman ]; then
  ok=0
  for _ in $(seq 30); do
    podman healthcheck run "$smoke" >/dev/null 2>&1 && { ok=1; break; }
    sleep 2
  done
  [ "$ok" = 1 ] || fail "the image's HEALTHCHECK did not pass in $smoke within 60 s"
  say "HEALTHCHECK passes in $smoke"
else
  for i in $(seq 61); do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$smoke")" = healthy ] && break
    [ "$i" = 61 ] && fail "Docker did not report $smoke healthy within 60 s"
    sleep 1
  done
  say "Docker reports $smoke healthy"
fi

# ---------------------------------------------------------------- 6. SIGTERM
t0=$(date +%s%N)
"$engine" stop -t 60 "$smoke" >/dev/null || fail "$engine stop $smoke"
ms=$((($(date +%s%N) - t0) / 1000000))
code=$("$engine" inspect -f '{{.State.ExitCode}}' "$smoke")
[ "$ms" -le 3000 ] || fail "SIGTERM took ${ms} ms to stop $smoke, more than 3 s"
if [ "${SMOKE_REQUIRE_SIGTERM:-0}" = 1 ] && [ "$code" != 0 ]; then
  fail "$smoke exited $code on SIGTERM, not 0"
fi
say "SIGTERM stopped $smoke in ${ms} ms, exit code $code"
say "passed"
