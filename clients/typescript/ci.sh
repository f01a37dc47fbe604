#!/usr/bin/env bash
# Installs the TypeScript client's dependencies from the npm registry (the
# lockfile is committed), builds it, and runs its whole test suite against a
# real `pigeon serve` (PIGEON_BIN, else built from the repository root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
command -v node >/dev/null || { echo "ci.sh: node is required (Node 20+)" >&2; exit 1; }
if [ -z "${PIGEON_BIN:-}" ]; then
  PIGEON_BIN="$(mktemp -d)/pigeon"
  (cd ../.. && go build -o "$PIGEON_BIN" ./cmd/pigeon)
  export PIGEON_BIN
fi
npm ci --no-audit --no-fund --loglevel=error
npx tsc -p tsconfig.json
node --test --test-concurrency=1 test/unit.test.mjs test/hostile.test.mjs test/hostile_server_and_caller.test.mjs test/hostile_server_resources.test.mjs test/dupkey.test.mjs test/surrogate.test.mjs test/ack_sequence.test.mjs test/sequence_and_sealing_bounds.test.mjs test/nack_delay_and_reused_id.test.mjs test/key_cache_verify_and_resume.test.mjs test/decision_sequence.test.mjs test/hops.test.mjs test/pulled_message_checks.test.mjs test/lease_attempts.test.mjs test/reply_correlation.test.mjs test/edited_delivery.test.mjs test/receipts.test.mjs test/listings.test.mjs test/key_lists.test.mjs test/x25519_low_order.test.mjs test/answer_shapes.test.mjs test/signature_v_spelling.test.mjs test/delivery_sequence.test.mjs test/delivery_fields.test.mjs test/delivery_push.test.mjs test/message_shapes.test.mjs test/decision_shapes.test.mjs test/minus_zero.test.mjs test/times.test.mjs test/time_vectors.test.mjs test/conformance.test.mjs test/browser.test.mjs
