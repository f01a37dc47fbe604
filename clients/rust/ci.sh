#!/usr/bin/env bash
# CI of the Rust client: fetches the locked crates, builds the server unless
# PIGEON_BIN names one, checks the formatting and the lints (clippy, every
# target, warnings as errors) where those tools are installed, and runs the
# whole suite (unit tests, the conformance scenarios against real `pigeon
# serve` processes, doc tests; `cargo test` builds the examples too).
# Runnable from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

cargo --version
if [ -z "${PIGEON_BIN:-}" ]; then
  export PIGEON_BIN="$here/target/pigeon-server"
  mkdir -p "$here/target"
  echo "== go build ./cmd/pigeon -> $PIGEON_BIN"
  (cd "$root" && go build -o "$PIGEON_BIN" ./cmd/pigeon)
fi

if cargo fmt --version >/dev/null 2>&1; then
  echo "== cargo fmt --check"
  cargo fmt --check
fi

if cargo clippy --version >/dev/null 2>&1; then
  echo "== cargo clippy"
  cargo clippy --locked --all-targets -- -D warnings
fi

echo "== cargo test --locked"
cargo fetch --locked
# A bound on the whole run (build included): a hang fails CI rather than stalling it.
timeout --kill-after=10 900 cargo test --locked -j "${CARGO_BUILD_JOBS:-2}" -- --nocapture
