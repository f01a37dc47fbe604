#!/bin/sh
# Tests of the bridge/nats module (its own Go module: the root's
# `go test ./...` does not reach it). Needs nothing installed beyond Go: the
# tests embed nats-server with JetStream and run brokers in process and
# over WebSocket.
set -eu
cd "$(dirname "$0")/../bridge/nats"
go vet ./...
go test -race -count=1 -timeout 5m ./...
