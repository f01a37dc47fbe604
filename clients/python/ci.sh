#!/usr/bin/env bash
# The Python client's CI: a virtual environment from the hashed lock, then
# the whole suite against a real `pigeon serve` (built here unless
# PIGEON_BIN names one). Runnable from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-lock.txt
# The package is used from the source tree (no build step needed to test it).
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"

if [ -z "${PIGEON_BIN:-}" ]; then
  bindir="$(mktemp -d)"
  trap 'rm -rf "$bindir"' EXIT
  (cd "$root" && nice go build -o "$bindir/pigeon" ./cmd/pigeon)
  export PIGEON_BIN="$bindir/pigeon"
fi

export PIGEON_REQUIRE_ALL_SCENARIOS=1
# A bound on the whole run: a hang fails CI rather than stalling it.
timeout --kill-after=10 600 .venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
