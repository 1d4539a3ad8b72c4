#!/usr/bin/env bash
# Installs Ray from PyPI into a virtualenv (default ~/.cache/troupe-bench-venv) for the tests that
# drive Troupe's head with Ray's own job SDK and CLI (tests/jobs_test.cc, tests/job_logs_test.cc)
# and for the benchmarks (bench/setup_peers.sh adds their other packages). scripts/test.sh runs it.
#
#   bash scripts/install_ray.sh [venv dir]
#
# Idempotent and quick when done already: a stamp file in the virtualenv records the installed
# version. On failure (e.g. no network) it exits 1 and writes why to <venv dir>.unavailable, which
# the tests quote when they skip; a later success removes that file.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-$HOME/.cache/troupe-bench-venv}
RAY_VERSION=2.60.0  # the version docs/benchmarks.md reports
stamp="$VENV/.troupe-ray-$RAY_VERSION"
unavailable="$VENV.unavailable"

if [ -f "$stamp" ] && [ -x "$VENV/bin/ray" ] && [ -x "$VENV/bin/python" ]; then
  rm -f "$unavailable"
  exit 0
fi

give_up() {
  mkdir -p "$(dirname "$unavailable")"
  printf '%s\n' "$1" > "$unavailable"
  echo "install_ray.sh: $1" >&2
  exit 1
}

echo "Installing Ray $RAY_VERSION from PyPI into $VENV"
# Debian's Python (python3-venv), not whichever python3 comes first on PATH.
if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv "$VENV" ||
    give_up "could not make the virtualenv $VENV (is python3-venv installed?)"
fi
log="$(mktemp)"
if ! "$VENV/bin/pip" install -q --disable-pip-version-check --timeout 20 --retries 2 \
  "ray[default]==$RAY_VERSION" > "$log" 2>&1; then
  reason="pip install ray[default]==$RAY_VERSION failed (no network to PyPI?): $(tail -n 3 "$log" | tr '\n' ' ')"
  rm -f "$log"
  give_up "$reason"
fi
rm -f "$log"
# What the tests use: the job SDK (with aiohttp, from ray[default]) and the CLI.
"$VENV/bin/python" -c 'import ray, ray.job_submission, aiohttp' 2>/dev/null && [ -x "$VENV/bin/ray" ] ||
  give_up "Ray installed into $VENV but 'import ray.job_submission, aiohttp' or bin/ray fails"
touch "$stamp"
rm -f "$unavailable"
echo "Ray $RAY_VERSION installed in $VENV"
