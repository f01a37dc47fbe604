//go:build stress

package wal

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// Run with:
//
//	go test -tags stress -run TestStressOpen -v -timeout 30m ./store/wal/
//
// It writes 1,000,000 messages of 300 bytes over 16 subjects (ids of 26
// bytes, one in ten with a live idempotency key), closes the store, and
// opens it in a fresh process that reports open time, live heap and RSS.

const stressEnv = "PIGEON_STRESS_DIR"

func TestStressOpen(t *testing.T) {
	if os.Getenv(stressEnv) != "" {
		t.Skip("parent only")
	}
	const total, subjects, writers = 1_000_000, 16, 8
	dir := t.TempDir()
	s, err := Open(dir, &Options{Sync: SyncNone})
	require.NoError(t, err)
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	body := make([]byte, 300)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < total; i += writers {
				m := store.Message{
					Subject: fmt.Sprintf("orders.region-%02d", i%subjects),
					ID:      fmt.Sprintf("01JD%022d", i), // ULID-sized
					Time:    base.Add(time.Duration(i) * time.Millisecond),
					Body:    body,
				}
				if i%10 == 0 {
					m.IdemKey, m.IdemExpires = "idem-"+m.ID, m.Time.Add(time.Hour)
				}
				if _, _, err := s.Append(ctx, m); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close(ctx))
	t.Logf("wrote %d messages in %v", total, time.Since(start))
	out, err := exec.Command("du", "-sh", dir).CombinedOutput()
	require.NoError(t, err)
	t.Logf("on disk: %s", strings.TrimSpace(string(out)))

	for range 2 { // the second run has a warm page cache
		cmd := exec.Command(os.Args[0], "-test.run=^TestStressOpenChild$", "-test.v")
		cmd.Env = append(os.Environ(), stressEnv+"="+dir)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if strings.Contains(sc.Text(), "STRESS") {
				t.Log(strings.TrimSpace(sc.Text()))
			}
		}
	}
}

func TestStressOpenChild(t *testing.T) {
	dir := os.Getenv(stressEnv)
	if dir == "" {
		t.Skip("child only")
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0, rss0 := ms.HeapInuse, procStatus("VmRSS")
	start := time.Now()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	openTime := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("STRESS open %v; heap in use %d MiB (%d before); RSS %s (%s before); peak RSS %s",
		openTime.Round(time.Millisecond), (ms.HeapInuse)>>20, heap0>>20, procStatus("VmRSS"), rss0, procStatus("VmHWM"))
	s.msgs.idx.mu.Lock()
	t.Logf("STRESS index: %d ids in %d slots (%d MiB), %d live idempotency keys",
		s.msgs.idx.ids.Len(), s.msgs.idx.ids.Cap(), s.msgs.idx.ids.Cap()*16>>20, s.msgs.idx.idem.Len())
	s.msgs.idx.mu.Unlock()

	ctx := context.Background()
	start = time.Now()
	for i := 0; i < 1_000_000; i += 9973 {
		m, err := s.Lookup(ctx, fmt.Sprintf("01JD%022d", i))
		require.NoError(t, err)
		require.Len(t, m.Body, 300)
	}
	t.Logf("STRESS 101 lookups spread over the store: %v", time.Since(start).Round(time.Microsecond))
	require.NoError(t, s.Close(ctx))
}

func procStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
