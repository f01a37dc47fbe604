package wal

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// delivered is a record of m's delivery, as a reader of the store that
// was handed m makes it.
func delivered(m store.Message) store.AuditRecord {
	return store.AuditRecord{Type: "delivery.acked", Outcome: "allow", Code: "OK", Principal: "reader",
		Subject: m.Subject, MessageID: m.ID, Seqs: strconv.FormatUint(m.Seq, 10), Time: base}
}

// requireAcceptedFirst requires that the audit log of s verifies and that
// the acceptance record of every message of ms precedes the record of its
// delivery (delivered).
func requireAcceptedFirst(t *testing.T, s *Store, ms []store.Message) {
	t.Helper()
	ctx := context.Background()
	recs, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	_, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.NoError(t, store.VerifyChain(cp, recs))
	for _, m := range ms {
		accepted, delivery := -1, -1
		for i, r := range recs {
			if r.MessageID != m.ID || r.Subject != m.Subject || r.Seqs != strconv.FormatUint(m.Seq, 10) {
				continue
			}
			switch r.Type {
			case "publish.accepted":
				accepted = i
			case "delivery.acked":
				delivery = i
			}
		}
		require.NotEqual(t, -1, accepted, "%s has its acceptance record", m.ID)
		require.NotEqual(t, -1, delivery, "%s has its delivery record", m.ID)
		require.Less(t, accepted, delivery, "the acceptance of %s precedes its delivery in the chain", m.ID)
	}
}

// TestChainAuditFollowsTheAcceptances: a message appended with its
// acceptance record (AppendAccepted, alone and in a batch over two
// subjects) is read and its delivery recorded with ChainAudit at once.
// In the chain the acceptance comes first. Before, ChainAudit chained its
// records at once while the acceptances waited in the outbox for the
// accept flusher (up to acceptLinger; here an hour, so that the flusher
// never runs first): every delivery record preceded its acceptance, and
// a page of receipts read between the two could not match it.
func TestChainAuditFollowsTheAcceptances(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		for _, batch := range []bool{false, true} {
			name := mode.String() + "/single"
			if batch {
				name = mode.String() + "/batch"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				s := open(t, t.TempDir(), &Options{Sync: mode, faults: &faults{linger: time.Hour}})
				var ms []store.Message
				if batch {
					in := []store.Message{msg("a", "m1", base), msg("b", "m2", base), msg("a", "m3", base)}
					accs := []store.AuditRecord{acceptance("p-m1"), acceptance("p-m2"), acceptance("p-m3")}
					for _, res := range s.AppendAcceptedBatch(ctx, in, accs) {
						require.NoError(t, res.Err)
						ms = append(ms, res.Stored)
					}
				} else {
					m, dup, err := s.AppendAccepted(ctx, msg("a", "m1", base), acceptance("p-m1"))
					require.NoError(t, err)
					require.False(t, dup)
					ms = append(ms, m)
				}
				for _, m := range ms {
					got, err := s.Read(ctx, m.Subject, m.Seq, 1)
					require.NoError(t, err)
					require.Len(t, got, 1, "%s is there to read", m.ID)
					require.NoError(t, s.ChainAudit(ctx, []store.AuditRecord{delivered(got[0])}))
				}
				requireAcceptedFirst(t, s, ms)
			})
		}
	}
}

// TestAcceptedBeforeVisible: a reader is handed a message in the first
// moment it can read it (the commit index is published; the hook runs on
// the committing writer, before the append returns) and records its
// delivery with ChainAudit. In the chain the acceptance comes first. Before,
// the commit index was published before the acceptance record reached
// the outbox, so a reader in that moment chained its delivery record
// first, whatever ChainAudit took from the outbox.
func TestAcceptedBeforeVisible(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			var (
				once    sync.Once
				read    []store.Message
				readErr error
				chain   error
				s       *Store
			)
			f := &faults{linger: time.Hour, visible: func(w *logw) {
				if w.name != "subject a" {
					return
				}
				once.Do(func() {
					read, readErr = s.Read(ctx, "a", 1, 1)
					if readErr == nil && len(read) == 1 {
						chain = s.ChainAudit(ctx, []store.AuditRecord{delivered(read[0])})
					}
				})
			}}
			s = open(t, t.TempDir(), &Options{Sync: mode})
			s.faults.Store(f)
			m, _, err := s.AppendAccepted(ctx, msg("a", "m1", base), acceptance("p-m1"))
			require.NoError(t, err)
			require.NoError(t, readErr)
			require.Len(t, read, 1, "the reader was handed the message")
			require.Equal(t, m.ID, read[0].ID)
			require.NoError(t, chain)
			requireAcceptedFirst(t, s, []store.Message{m})
		})
	}
}
