#!/usr/bin/env bash
# Runs tests/k8s_manifests_test.py (see there) on a copy of deploy/kubernetes (kustomize refuses
# files that are symlinks out of the kustomization, as runfiles are), with Debian's Python and its
# python3-yaml and python3-jsonschema (scripts/install_deps.sh installs them), against the
# Kubernetes schemas kept in tests/k8s_schemas. Offline; nothing is skipped: a missing tool fails.
set -uo pipefail
src="$TEST_SRCDIR/$TEST_WORKSPACE"
root="$TEST_TMPDIR/repo"
mkdir -p "$root/deploy" "$root/src/http" "$root/docs"
cp -rL "$src/deploy/kubernetes" "$root/deploy/"
cp -L "$src/src/http/http_server.cc" "$root/src/http/"
cp -L "$src/docs/deploy.md" "$root/docs/"

python=/usr/bin/python3
if ! "$python" -c 'import jsonschema, yaml' 2>/dev/null; then
  echo "FAIL: $python lacks yaml or jsonschema: run scripts/install_deps.sh (python3-yaml, python3-jsonschema)"
  exit 1
fi
exec "$python" "$src/tests/k8s_manifests_test.py" "$root" "$src/src/cli/troupe" "$src/tests/k8s_schemas"
