package pigeon_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
)

// acceptedSeqs is an Observer that keeps the Seqs of every
// publish.accepted record it is told of, by message id.
type acceptedSeqs struct {
	mu   sync.Mutex
	seqs map[string]string
}

func (o *acceptedSeqs) Audited(r pigeon.AuditRecord) {
	if r.Type != string(pigeon.EventPublishAccepted) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seqs[r.MessageID] = r.Seqs
}

func (o *acceptedSeqs) Took(pigeon.Stage, string, time.Duration)       {}
func (o *acceptedSeqs) Committed(pigeon.CommitLog, int, time.Duration) {}
func (o *acceptedSeqs) Noted(pigeon.Note, string)                      {}
func (o *acceptedSeqs) seqOf(id string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.seqs[id]
	return s, ok
}

// TestObserverSeesAcceptanceSequence: the Observer is told of every
// acceptance with the message's sequence (Seqs), as the audit log keeps
// it, whichever store keeps the message (the memory store, which queues
// the record with the append; the WAL store, which writes it with the
// message; any other store, whose record the engine queues) and whether
// the message was published alone or in a batch. Before, only the path
// of any other store set it: the memory and WAL stores set the sequence
// on their own copy of the record, and the Observer was told of one
// without it.
func TestObserverSeesAcceptanceSequence(t *testing.T) {
	for _, tt := range []struct {
		name string
		st   func(t *testing.T) store.Store
	}{
		{name: "memory", st: func(*testing.T) store.Store { return nil }},
		{name: "wal", st: func(t *testing.T) store.Store {
			st, err := wal.Open(t.TempDir(), nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close(context.Background()) })
			return st
		}},
		{name: "any other store", st: func(t *testing.T) store.Store {
			st := &appendHooks{Store: memory.New(nil)}
			t.Cleanup(func() { _ = st.Close(context.Background()) })
			return st
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &acceptedSeqs{seqs: map[string]string{}}
			st := tt.st(t)
			f := newFixture(t, func(opts *pigeon.Options) {
				opts.Observer = o
				if st != nil {
					opts.Store = st
				}
			})
			s := f.connect("checkout-token", "payments.authorize")
			c := callerOf(s)
			var got []*pigeon.Message
			res, err := f.e.Publish(ctx, c, demo.Payment("o-1"))
			require.NoError(t, err)
			got = append(got, res.Message)
			for _, p := range f.e.PublishBatch(ctx, c, []*pigeon.Message{demo.Payment("o-2"), demo.Payment("o-3")}) {
				require.NoError(t, p.Err)
				got = append(got, p.Result.Message)
			}
			logged, err := f.e.Audit(ctx, 0, 0)
			require.NoError(t, err)
			inLog := acceptances(logged)
			for _, m := range got {
				want := strconv.FormatUint(m.Sequence, 10)
				require.Equal(t, want, inLog[m.ID], "the log's record")
				seq, ok := o.seqOf(m.ID)
				require.True(t, ok, "the Observer is told of the acceptance")
				require.Equal(t, want, seq, "the Observer is told the sequence, as the log keeps it")
			}
		})
	}
}
