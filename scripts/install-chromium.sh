#!/bin/sh
# Install Debian's chromium for the console browser test (server/console).
# Idempotent: does nothing when a chromium binary is already on PATH.
# Run as root (CI runs it before the Go tests).
set -eu
for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null 2>&1; then
		echo "install-chromium: $b already present at $(command -v "$b")"
		exit 0
	fi
done
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium
command -v chromium
