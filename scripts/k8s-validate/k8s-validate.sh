#!/usr/bin/env bash
# The project's own Kubernetes manifest validator (validate.mjs beside this
# file: kubernetes-models' schemas for types, required fields and formats,
# TypeScript's excess-property check for unknown fields), run offline.
#   scripts/k8s-validate/k8s-validate.sh [--quiet] PATH...   files or folders
#   scripts/k8s-validate/k8s-validate.sh [--quiet] -         YAML on stdin
#   scripts/k8s-validate/k8s-validate.sh --selftest          proves it rejects
#       an unknown field, a wrong type, a missing required field, an
#       unknown kind and a custom resource's (cert-manager's) unknown field
#       (testdata/bad-*.yaml), and accepts testdata/good.yaml
# Needs node >= 18 and npm (Debian's nodejs and npm; scripts/install-deps.sh
# installs them); the first run installs the locked packages
# (package-lock.json) into node_modules/ here with `npm ci`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/../npm-ci.sh" "$here" k8s-validate

if [ "${1:-}" = --selftest ]; then
  # expect_reject FILE TEXT: validation fails, and its message has TEXT.
  expect_reject() {
    local out rc=0
    out=$(node "$here/validate.mjs" --quiet "$here/testdata/$1" 2>&1) || rc=$?
    if [ "$rc" != 1 ] || ! grep -qF -- "$2" <<<"$out"; then
      echo "k8s-validate: SELF-TEST FAILED: $1: exit $rc, expected 1 with '$2':" >&2
      echo "$out" >&2
      exit 1
    fi
  }
  expect_reject bad-unknown-field.yaml "/spec/template/spec/containers/0/readinesProbe: Object literal may only specify known properties"
  expect_reject bad-wrong-type.yaml "/spec/replicas must be integer"
  expect_reject bad-missing-required.yaml "/spec/ports/0 must have required property port"
  expect_reject bad-unknown-kind.yaml "unknown apiVersion/kind apps/v1 StatefulSett"
  expect_reject bad-custom-resource.yaml "/spec/dnsName: Object literal may only specify known properties"
  node "$here/validate.mjs" --quiet "$here/testdata/good.yaml" >/dev/null ||
    { echo "k8s-validate: SELF-TEST FAILED: testdata/good.yaml refused" >&2; exit 1; }
  echo "k8s-validate: self-test passed (unknown field, wrong type, missing field, unknown kind, a custom resource's unknown field refused; a valid file accepted)"
  exit 0
fi
exec node "$here/validate.mjs" "$@"
