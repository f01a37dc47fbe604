#!/bin/sh
# Tests of the store/jetstream module (its own Go module: the root's
# `go test ./...` does not reach it). Needs nothing installed beyond Go: the
# tests embed nats-server and run their cluster nodes as child processes.
set -eu
cd "$(dirname "$0")/../store/jetstream"
go vet ./...
go test -race -count=1 ./...
