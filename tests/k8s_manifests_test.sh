#!/usr/bin/env bash
# Runs tests/k8s_manifests_test.py (see there) on a copy of deploy/kubernetes (kustomize refuses
# files that are symlinks out of the kustomization, as runfiles are), with a Python that has the
# kubernetes-validate package (its JSON schemas of Kubernetes) from PyPI: a virtual environment
# under ~/.cache made on the first run. Without it the schema checks are skipped, saying why.
set -uo pipefail
src="$TEST_SRCDIR/$TEST_WORKSPACE"
root="$TEST_TMPDIR/repo"
mkdir -p "$root/deploy" "$root/src/http" "$root/docs"
cp -rL "$src/deploy/kubernetes" "$root/deploy/"
cp -L "$src/src/http/http_server.cc" "$root/src/http/"
cp -L "$src/docs/deploy.md" "$root/docs/"

venv="${HOME:-/root}/.cache/troupe-k8s-validate"
python=python3
if ! "$venv/bin/python" -c 'import kubernetes_validate, yaml' 2>/dev/null; then
  rm -rf "$venv"
  if python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0; then
    python="$venv/bin/python"
  else
    echo "could not install kubernetes-validate into $venv (no PyPI?)"
    rm -rf "$venv"
  fi
else
  python="$venv/bin/python"
fi
exec "$python" "$src/tests/k8s_manifests_test.py" "$root" "$src/src/cli/troupe"
