package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestSequenceBeyondIndexRange: a message location packs the sequence in
// seqBits bits, and Append never uses a sequence beyond them. A log on
// disk whose entries are numbered beyond them (a damaged or foreign file;
// the checksum is no proof of origin) would make its messages' locations
// point into the next subject's log: Open refuses it as corruption.
func TestSequenceBeyondIndexRange(t *testing.T) {
	cases := []struct {
		name  string
		start uint64
		ok    bool
	}{
		{"last usable sequence", 1<<seqBits - 1, true},
		{"first sequence beyond", 1 << seqBits, false},
		{"far beyond", 1 << 62, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, nil)
			appendN(t, s, "a", 1, 1)
			appendN(t, s, "b", 1, 1)
			require.NoError(t, s.Close(t.Context()))

			// Replace a's log with one whose only entry is at c.start.
			logDir := subjectLogDir(dir, "a")
			for _, sg := range segs(t, logDir) {
				require.NoError(t, os.Remove(sg.path))
			}
			m := msg("a", "far", base)
			m.Seq = c.start
			path := filepath.Join(logDir, segmentName(c.start))
			require.NoError(t, os.WriteFile(path, frame(nil, appendMessage(nil, &m)), 0o640))
			require.NoError(t, os.Remove(cleanPath(dir)))

			s2, err := Open(dir, nil)
			if !c.ok {
				require.ErrorIs(t, err, store.ErrCorrupt)
				var ce *store.CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, path, ce.File)
				return
			}
			require.NoError(t, err)
			defer s2.Close(t.Context())
			got, err := s2.Lookup(t.Context(), "far")
			require.NoError(t, err)
			require.Equal(t, c.start, got.Seq)
			_, err = s2.Lookup(t.Context(), "b-1")
			require.NoError(t, err)
		})
	}
}
