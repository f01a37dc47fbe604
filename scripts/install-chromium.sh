#!/bin/sh
# Install Debian's chromium (and a font, for readable screenshots) for the
# browser tests: the console's (server/console_browser_test.go) and the
# TypeScript client's (clients/typescript/test/browser.test.mjs).
# Idempotent: it does nothing when a chromium binary is already on PATH.
# Run it as root; ./test calls it before the parts that need it.
set -eu
for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null 2>&1; then
		echo "install-chromium: $b already present at $(command -v "$b")"
		exit 0
	fi
done
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium fonts-dejavu-core
command -v chromium
