package wal

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// A checkpoint's floor count sized the map it was read into before any
// entry was read: a checkpoint file of 2 MiB (a million floors, each an
// empty name and a zero, all one entry) made the offline tools and Open
// allocate a map for a million subjects, some fifteen times the file. The
// map now grows with the floors actually read, and a count that the
// record's bytes cannot hold is refused.
func TestCheckpointFloorCountBoundedByRecord(t *testing.T) {
	const n = 1 << 20
	e := newEnc(kindCheckpoint, 2*n+80)
	e.uvarint(7)
	e.str(store.Genesis)
	e.uvarint(n)
	for range n {
		e.str("")
		e.uvarint(0)
	}
	rec := e.finish()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cp, floors, err := decodeCheckpointFloors(rec)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Equal(t, uint64(7), cp.Seq)
	require.Equal(t, map[string]uint64{"": 0}, floors)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(len(rec)),
		"decoding a checkpoint allocates more than the record's size")

	// A count beyond what the bytes left can hold (two per floor).
	e = newEnc(kindCheckpoint, 80)
	e.uvarint(7)
	e.str(store.Genesis)
	e.uvarint(3)
	e.raw([]byte{0, 0, 0, 0})
	_, _, err = decodeCheckpointFloors(e.finish())
	require.Error(t, err)
}

// FuzzAuditSegment: whatever bytes an audit segment holds (after a first
// segment of sound records, with or without the CLEAN marker), the
// offline verification neither panics nor reads past the file, and it
// either verifies some of the sound records or fails with a typed error.
func FuzzAuditSegment(f *testing.F) {
	var sound []byte
	for _, r := range storetest.Chain(4) {
		sound = frame(sound, encodeAudit(&r))
	}
	f.Add(sound, false)
	f.Add(sound[:len(sound)-3], true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, false)
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x04, 1, 2, 3}, true)
	f.Add(append([]byte{0x10}, make([]byte, 40)...), false)
	f.Fuzz(func(t *testing.T, tail []byte, clean bool) {
		dir := t.TempDir()
		require.NoError(t, os.Mkdir(auditDir(dir), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(auditDir(dir), segmentName(1)), sound, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(auditDir(dir), segmentName(5)), tail, 0o600))
		if clean {
			require.NoError(t, writeClean(dir, base))
		}
		n, err := VerifyAudit(dir)
		if err != nil {
			var ce *store.CorruptError
			require.True(t, errors.As(err, &ce) || errors.Is(err, store.ErrTampered), "untyped error %v", err)
			return
		}
		require.GreaterOrEqual(t, n, uint64(4))
	})
}
