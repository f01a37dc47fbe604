package cli

import (
	"bufio"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serve --max-connections and --max-connections-per-ip (or
// max_connections and max_connections_per_ip in the config file) cap the
// connections the server holds: parsed from either, and in force on a real
// listener, where a cap of one answers a second connection 429.
// --max-programs (max_programs) and --max-program-memory
// (max_program_memory_mb), --max-read-memory (max_read_memory_mb) and
// --max-read-memory-per-principal (max_read_memory_per_principal_mb) are
// parsed beside them.
func TestServeMaxConnections(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--max-connections", "7", "--max-connections-per-ip", "3", "--max-programs", "4", "--max-program-memory", "512", "--max-read-memory", "64", "--max-read-memory-per-principal", "32"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 7, cfg.maxConns)
	require.Equal(t, 3, cfg.maxConnsPerIP)
	require.Equal(t, 4, cfg.maxPrograms)
	require.EqualValues(t, 512, cfg.maxProgramMemMB)
	require.EqualValues(t, 512<<20, mibBytes(cfg.maxProgramMemMB))
	require.EqualValues(t, 64, cfg.maxReadMemMB)
	require.EqualValues(t, 32, cfg.maxReadShareMB)
	_, code, ok := parseServe([]string{"--max-connections", "lots"}, io.Discard, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	file := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("max_connections: -1\nmax_connections_per_ip: 5\nmax_programs: -1\nmax_program_memory_mb: -1\nmax_read_memory_mb: -1\nmax_read_memory_per_principal_mb: -1\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, -1, cfg.maxConns)
	require.Equal(t, 5, cfg.maxConnsPerIP)
	require.Equal(t, -1, cfg.maxPrograms)
	require.EqualValues(t, -1, mibBytes(cfg.maxProgramMemMB))
	require.EqualValues(t, -1, cfg.maxReadMemMB)
	require.EqualValues(t, -1, cfg.maxReadShareMB)
	require.EqualValues(t, math.MaxInt64, mibBytes(math.MaxInt64))
	require.Zero(t, mibBytes(0), "0 leaves the default")

	r := startServe(t, serveConfig{maxConns: 1})
	addr := strings.TrimPrefix(r.url, "http://")
	status := func(c net.Conn) int {
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Write([]byte("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	held, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer held.Close()
	require.Equal(t, http.StatusOK, status(held))
	second, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer second.Close()
	require.Equal(t, http.StatusTooManyRequests, status(second))
}
