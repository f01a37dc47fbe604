package jetstream

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// t0 is when the audit records of these tests begin.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// chainBatches chains one batch per element of batches onto s's chain,
// each record at t0 plus its offset in seconds, and returns the records.
func chainBatches(t *testing.T, s *Store, batches ...[]int) []store.AuditRecord {
	t.Helper()
	var out []store.AuditRecord
	for _, b := range batches {
		recs := make([]store.AuditRecord, len(b))
		for i, sec := range b {
			recs[i] = store.AuditRecord{Type: "publish.accepted", Principal: "p", Time: t0.Add(time.Duration(sec) * time.Second)}
		}
		require.NoError(t, s.ChainAudit(t.Context(), recs))
		out = append(out, recs...)
	}
	return out
}

func cpOf(r store.AuditRecord) store.Checkpoint { return store.Checkpoint{Seq: r.Seq, Hash: r.Hash} }

// auditState is what a node's chain looks like from the store and from
// the offline verification.
type auditState struct {
	cp   store.Checkpoint
	recs []store.AuditRecord // after cp
	msgs uint64              // stream messages kept
}

func requireAuditState(t *testing.T, s *Store, want auditState) {
	t.Helper()
	ctx := t.Context()
	last, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, want.cp, cp)
	if len(want.recs) == 0 {
		require.Zero(t, last)
	} else {
		require.Equal(t, want.recs[len(want.recs)-1], last)
	}
	got, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	if len(want.recs) == 0 {
		require.Empty(t, got)
	} else {
		require.Equal(t, want.recs, got)
	}
	n, err := store.VerifyAudit(ctx, s)
	require.NoError(t, err)
	require.Equal(t, uint64(len(want.recs)), n)

	reports, err := VerifyAudit(ctx, s.nc, s.Prefix())
	require.NoError(t, err)
	require.Len(t, reports, 1)
	require.NoError(t, reports[0].Err)
	require.Equal(t, want.cp, reports[0].From)
	require.Equal(t, uint64(len(want.recs)), reports[0].Records)

	info, err := s.audit.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, want.msgs, info.State.Msgs, "stream messages kept")
}

// TestTrimAuditStraddlingBatch: a batch is purged only once every record
// in it is trimmed, but the chain is trimmed to the record: the records of
// a batch that t falls inside leave the chain and are counted.
func TestTrimAuditStraddlingBatch(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	s, err := Open(t.Context(), nc, &Options{Prefix: freshPrefix()})
	require.NoError(t, err)
	recs := chainBatches(t, s, []int{0, 1, 2}, []int{3, 4, 5}, []int{6})

	steps := []struct {
		name   string
		before int // seconds after t0
		n      int
		want   auditState
	}{
		{"nothing before the first record", 0, 0, auditState{recs: recs, msgs: 3}},
		{"into the second batch", 4, 4, auditState{cp: cpOf(recs[3]), recs: recs[4:], msgs: 2}},
		{"further into it", 5, 1, auditState{cp: cpOf(recs[4]), recs: recs[5:], msgs: 2}},
		{"the same time again", 5, 0, auditState{cp: cpOf(recs[4]), recs: recs[5:], msgs: 2}},
		{"past its last record: purged", 6, 1, auditState{cp: cpOf(recs[5]), recs: recs[6:], msgs: 1}},
		{"everything", 3600, 1, auditState{cp: cpOf(recs[6]), msgs: 0}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			n, err := s.TrimAuditBefore(t.Context(), t0.Add(time.Duration(st.before)*time.Second))
			require.NoError(t, err)
			require.Equal(t, st.n, n)
			requireAuditState(t, s, st.want)
		})
	}
}

// TestTrimAuditReopen: the checkpoint is in JetStream, so a new Store of
// the node (another process, another connection) finds it, and the chain
// continues from it after retention removed every record.
func TestTrimAuditReopen(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := freshPrefix()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a"})
	require.NoError(t, err)
	recs := chainBatches(t, s, []int{0, 1}, []int{2})
	n, err := s.TrimAuditBefore(ctx, t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, s.Close(ctx))

	s, err = Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a"})
	require.NoError(t, err)
	requireAuditState(t, s, auditState{cp: cpOf(recs[2])})

	// AppendAudit continues the chain from the checkpoint, and so does
	// ChainAudit.
	next := store.AuditRecord{Seq: 4, ID: "aud_4", Type: "x", Time: t0.Add(time.Hour), PrevHash: recs[2].Hash}
	next.Hash = next.ComputeHash()
	bad := next
	bad.Seq = 1
	require.Error(t, s.AppendAudit(ctx, bad), "the chain does not start again at 1")
	require.NoError(t, s.AppendAudit(ctx, next))
	more := chainBatches(t, s, []int{3601})
	require.Equal(t, uint64(5), more[0].Seq)
	require.Equal(t, next.Hash, more[0].PrevHash)
	requireAuditState(t, s, auditState{cp: cpOf(recs[2]), recs: []store.AuditRecord{next, more[0]}, msgs: 2})

	// Another node's store sees a's checkpoint in the offline verification.
	b, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "b"})
	require.NoError(t, err)
	chainBatches(t, b, []int{0})
	reports, err := VerifyAudit(ctx, b.Conn(), prefix)
	require.NoError(t, err)
	require.Len(t, reports, 2)
	require.Equal(t, ChainReport{Node: "a", From: cpOf(recs[2]), Records: 2, Head: cpOf(more[0])}, reports[0])
	require.NoError(t, reports[1].Err)
	require.Zero(t, reports[1].From)
}

// TestVerifyAuditAfterTrim: a trimmed chain verifies from its checkpoint,
// and a gap, a changed or a reordered record after it, or a checkpoint
// that was removed or changed, does not.
func TestVerifyAuditAfterTrim(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	changed := func(r store.AuditRecord, rehash bool) store.AuditRecord {
		r.Principal = "mallory"
		if rehash {
			r.Hash = r.ComputeHash()
		}
		return r
	}
	// The stream holds b1 [1 2] (purged), b2 [3 4], b3 [5 6], b4 [7] as
	// stream messages 1 to 4; the checkpoint is record 3.
	cases := []struct {
		name    string
		tamper  func(t *testing.T, s *Store, st jetstream.Stream, recs []store.AuditRecord)
		seq     uint64 // where the chain breaks; 0 when it holds
		records uint64 // verified before
	}{
		{"untouched", func(*testing.T, *Store, jetstream.Stream, []store.AuditRecord) {}, 0, 4},
		{"changed record", func(t *testing.T, s *Store, st jetstream.Stream, recs []store.AuditRecord) {
			require.NoError(t, st.DeleteMsg(t.Context(), 4))
			republish(t, s, changed(recs[6], false))
		}, 7, 3},
		{"changed record with its hash recomputed", func(t *testing.T, s *Store, st jetstream.Stream, recs []store.AuditRecord) {
			require.NoError(t, st.DeleteMsg(t.Context(), 3))
			require.NoError(t, st.DeleteMsg(t.Context(), 4))
			republish(t, s, changed(recs[4], true), recs[5])
			republish(t, s, recs[6])
		}, 6, 2},
		{"gap after the checkpoint", func(t *testing.T, s *Store, st jetstream.Stream, recs []store.AuditRecord) {
			require.NoError(t, st.DeleteMsg(t.Context(), 3))
		}, 7, 1},
		{"first record after the checkpoint removed", func(t *testing.T, s *Store, st jetstream.Stream, recs []store.AuditRecord) {
			require.NoError(t, st.DeleteMsg(t.Context(), 2))
		}, 5, 0},
		{"reordered", func(t *testing.T, s *Store, st jetstream.Stream, recs []store.AuditRecord) {
			require.NoError(t, st.DeleteMsg(t.Context(), 3))
			republish(t, s, recs[4], recs[5])
		}, 7, 1},
		{"checkpoint removed", func(t *testing.T, s *Store, _ jetstream.Stream, _ []store.AuditRecord) {
			require.NoError(t, s.auditCP.Delete(t.Context(), "node"))
		}, 3, 0},
		{"checkpoint changed", func(t *testing.T, s *Store, _ jetstream.Stream, recs []store.AuditRecord) {
			_, err := s.auditCP.Put(t.Context(), "node", []byte(`{"seq":3,"hash":"`+recs[1].Hash+`"}`))
			require.NoError(t, err)
		}, 3, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			s, err := Open(ctx, nc, &Options{Prefix: freshPrefix()})
			require.NoError(t, err)
			recs := chainBatches(t, s, []int{0, 1}, []int{2, 10}, []int{11, 12}, []int{13})
			n, err := s.TrimAuditBefore(ctx, t0.Add(10*time.Second))
			require.NoError(t, err)
			require.Equal(t, 3, n)
			st, err := js.Stream(ctx, s.auditStream("node"))
			require.NoError(t, err)

			c.tamper(t, s, st, recs)
			reports, err := VerifyAudit(ctx, nc, s.Prefix())
			require.NoError(t, err)
			require.Len(t, reports, 1)
			rep := reports[0]
			require.Equal(t, c.records, rep.Records)
			_, err = store.VerifyAudit(ctx, s)
			if c.seq == 0 {
				require.NoError(t, rep.Err)
				require.Equal(t, cpOf(recs[2]), rep.From)
				require.Equal(t, cpOf(recs[6]), rep.Head)
				require.NoError(t, err, "the store's own view verifies too")
				return
			}
			var ce *store.ChainError
			require.ErrorAs(t, rep.Err, &ce)
			require.Equal(t, c.seq, ce.Seq, ce.Reason)
			require.ErrorIs(t, err, store.ErrTampered, "the store's own view fails too")
		})
	}
}

// republish appends recs as one batch at the end of s's stream, as
// someone with write access to the stream could.
func republish(t *testing.T, s *Store, recs ...store.AuditRecord) {
	t.Helper()
	js, err := jetstream.New(s.nc)
	require.NoError(t, err)
	b, err := json.Marshal(recs)
	require.NoError(t, err)
	msg := nats.NewMsg(s.auditSubject("node"))
	msg.Data = b
	msg.Header.Set(hdrAuditFirst, strconv.FormatUint(recs[0].Seq, 10))
	_, err = js.PublishMsg(t.Context(), msg)
	require.NoError(t, err)
}

// TestTrimAuditConcurrentAppends: trims running while the node chains
// batches lose no record at or after t, and the chain verifies all along:
// a verification that a trim overtakes starts again from its checkpoint.
func TestTrimAuditConcurrentAppends(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := Open(ctx, nc, &Options{Prefix: freshPrefix()})
	require.NoError(t, err)
	const old, during = 40, 60 // batches of two before the trims, and while they run
	for i := range old {
		chainBatches(t, s, []int{i, i})
	}
	cut := t0.Add(time.Hour)

	var (
		wg      sync.WaitGroup
		done    = make(chan struct{})
		kept    []store.AuditRecord // the records at or after cut
		appErr  error
		trimErr error
		trimmed int
		verErr  error
	)
	wg.Go(func() {
		defer close(done)
		for i := range during {
			at := t0.Add(time.Duration(old+i) * time.Second) // the first half before cut
			if i >= during/2 {
				at = cut.Add(time.Duration(i) * time.Second)
			}
			recs := []store.AuditRecord{{Type: "a", Time: at}, {Type: "b", Time: at}}
			if appErr = s.ChainAudit(ctx, recs); appErr != nil {
				return
			}
			if i >= during/2 {
				kept = append(kept, recs...)
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := s.TrimAuditBefore(ctx, cut)
			if err != nil {
				trimErr = err
				return
			}
			trimmed += n
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			reports, err := VerifyAudit(ctx, nc, s.Prefix())
			if err == nil {
				err = reports[0].Err
			}
			if err != nil {
				verErr = err
				return
			}
		}
	})
	wg.Wait()
	require.NoError(t, appErr)
	require.NoError(t, trimErr)
	require.NoError(t, verErr)
	n, err := s.TrimAuditBefore(ctx, cut)
	require.NoError(t, err)
	trimmed += n

	removed := 2 * (old + during/2)
	require.Equal(t, removed, trimmed, "every record before cut was removed once")
	got, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Equal(t, kept, got, "every record at or after cut is kept")
	_, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(removed), cp.Seq)
	reports, err := VerifyAudit(ctx, nc, s.Prefix())
	require.NoError(t, err)
	require.NoError(t, reports[0].Err)
	require.Equal(t, uint64(len(kept)), reports[0].Records)
}

// TestTrimAuditCheckpointFirst: the checkpoint is written before the
// purge, so a trim cut short at either step leaves a chain that verifies,
// and the next trim finishes a purge that did not happen.
func TestTrimAuditCheckpointFirst(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	refuse := func(t *testing.T, name string, change func(*jetstream.StreamConfig)) {
		st, err := js.Stream(t.Context(), name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		change(&cfg)
		_, err = js.UpdateStream(t.Context(), cfg)
		require.NoError(t, err)
	}
	cases := []struct {
		name   string
		cut    func(t *testing.T, s *Store, recs []store.AuditRecord) // cuts the trim short
		cp     int                                                    // the record the checkpoint names; -1: none
		finish bool                                                   // whether the next trim can purge
	}{
		{"the checkpoint cannot be written", func(t *testing.T, s *Store, _ []store.AuditRecord) {
			refuse(t, "KV_"+s.bucketName(auditBucket), func(c *jetstream.StreamConfig) { c.Sealed = true })
			_, err := s.TrimAuditBefore(t.Context(), t0.Add(5*time.Second))
			require.Error(t, err)
		}, -1, false},
		{"the purge fails", func(t *testing.T, s *Store, _ []store.AuditRecord) {
			refuse(t, s.auditStream("node"), func(c *jetstream.StreamConfig) { c.DenyPurge = true })
			_, err := s.TrimAuditBefore(t.Context(), t0.Add(time.Hour))
			require.Error(t, err)
		}, 4, false},
		{"a crash after the checkpoint", func(t *testing.T, s *Store, recs []store.AuditRecord) {
			require.NoError(t, s.putCheckpoint(t.Context(), cpOf(recs[3]), 0))
		}, 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open(t.Context(), nc, &Options{Prefix: freshPrefix()})
			require.NoError(t, err)
			recs := chainBatches(t, s, []int{0, 1}, []int{2, 3}, []int{10})
			c.cut(t, s, recs)
			want := auditState{recs: recs, msgs: 3}
			if c.cp >= 0 {
				want = auditState{cp: cpOf(recs[c.cp]), recs: recs[c.cp+1:], msgs: 3}
			}
			requireAuditState(t, s, want)
			if !c.finish {
				return
			}
			// The next trim finds nothing more to remove, and purges the
			// messages the cut-short one left.
			n, err := s.TrimAuditBefore(t.Context(), t0)
			require.NoError(t, err)
			require.Zero(t, n)
			want.msgs = 1
			requireAuditState(t, s, want)
		})
	}
}

// TestTrimAuditRefusesBrokenChain: a trim does not drop records that do
// not verify, so retention never erases the evidence of tampering.
func TestTrimAuditRefusesBrokenChain(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	ctx := t.Context()
	s, err := Open(ctx, nc, &Options{Prefix: freshPrefix()})
	require.NoError(t, err)
	chainBatches(t, s, []int{0}, []int{1}, []int{2})
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, s.auditStream("node"))
	require.NoError(t, err)
	require.NoError(t, st.DeleteMsg(ctx, 2))

	n, err := s.TrimAuditBefore(ctx, t0.Add(time.Hour))
	require.ErrorIs(t, err, store.ErrTampered)
	require.Zero(t, n)
	_, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Zero(t, cp, "the checkpoint did not move")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs, "nothing was purged")
}

// TestTrimAuditCheckpointCompareAndSet: two stores of one node (a process
// that claimed another's node id) never move the checkpoint back: a trim
// that read an older checkpoint fails to write it and reads again.
func TestTrimAuditCheckpointCompareAndSet(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	ctx := t.Context()
	prefix := freshPrefix()
	a, err := Open(ctx, nc, &Options{Prefix: prefix})
	require.NoError(t, err)
	a2, err := Open(ctx, nc, &Options{Prefix: prefix})
	require.NoError(t, err)
	recs := chainBatches(t, a, []int{0}, []int{1}, []int{2}, []int{3})

	n, err := a.TrimAuditBefore(ctx, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, rev, err := a.checkpoint(ctx)
	require.NoError(t, err)
	n, err = a2.TrimAuditBefore(ctx, t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, 2, n)

	// a's trim, had it read the checkpoint before a2 wrote, would write
	// over revision rev: refused.
	err = a.putCheckpoint(ctx, cpOf(recs[1]), rev)
	require.ErrorIs(t, err, jetstream.ErrKeyRevisionMismatch)
	requireAuditState(t, a, auditState{cp: cpOf(recs[2]), recs: recs[3:], msgs: 1})
	n, err = a.TrimAuditBefore(ctx, t0.Add(2*time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "the checkpoint does not move back")
	requireAuditState(t, a, auditState{cp: cpOf(recs[2]), recs: recs[3:], msgs: 1})
}
