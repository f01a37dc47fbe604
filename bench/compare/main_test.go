package main

import (
	"testing"

	"pigeon/internal/leakcheck"
)

// TestMain fails the run if goroutines outlive the tests: every scenario
// must stop the servers, connections and loads it started. A WebSocket
// server's op worker parked for the process's next op is not one of
// them (leakcheck knows it).
func TestMain(m *testing.M) { leakcheck.Main(m) }
