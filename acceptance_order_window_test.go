package pigeon_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// appendHooks is a memory store whose Append runs before first, while one
// is set (an error it returns refuses the append), and after once the
// inner Append returned and before it answers: the moment in which the
// message is in the store for every reader and the engine has not heard
// of it. Embedding the memory store, it takes the engine's path for any
// store (the memory store's own is for that type alone).
type appendHooks struct {
	*memory.Store
	before atomic.Pointer[func() error]
	after  atomic.Pointer[func(store.Message)]
}

func (s *appendHooks) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if f := s.before.Load(); f != nil {
		if err := (*f)(); err != nil {
			return store.Message{}, false, err
		}
	}
	got, dup, err := s.Store.Append(ctx, m)
	if h := s.after.Load(); h != nil && err == nil && !dup {
		(*h)(got)
	}
	return got, dup, err
}

// windowPage is what a worker and an auditor did inside the append of a
// message: its receipts' first page, of one, read after the deliveries.
type windowPage struct {
	first []pigeon.Receipt
	err   error // of the page, or of a step before it
}

// TestAcceptanceBeforeDeliveryOnAnyStore: on a store the engine knows
// nothing of (a type that embeds the memory store), a worker receives a
// message, three times, between the store's append and its answer, and
// an auditor reads the message's first page of receipts, of one, in that
// moment. Whatever that page answered is the front of every later answer,
// and the pages after it hold the rest, once; in the chain the message's
// acceptance comes before the first record of its delivery, and the chain
// verifies. Before the engine reserved the acceptance's place in the
// audit queue before Append, the acceptance was queued after Append
// returned, behind the three deliveries: the page read in the window
// could not match the first (a record listing two messages) and answered
// the second, and the pages after it left the first out for good.
func TestAcceptanceBeforeDeliveryOnAnyStore(t *testing.T) {
	st := &appendHooks{Store: memory.New(nil)}
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	e := f.e
	pub := f.connect("orders-token", "notifications.send")
	worker := f.connect("notifier-token", "notifications.send")
	const subject = "notifications.send"
	_, err := pub.Publish(ctx, demo.Notification("k-0"))
	require.NoError(t, err)

	var ran atomic.Bool
	done := make(chan windowPage, 1)
	var stuck atomic.Bool
	hook := func(m store.Message) {
		if !ran.CompareAndSwap(false, true) {
			return
		}
		go func() { done <- inAppendWindow(f, worker, subject, m) }()
		// The window stays open until the steps are done, unless they
		// wait for the append themselves: a deadlock, reported below.
		select {
		case w := <-done:
			done <- w
		case <-time.After(10 * time.Second):
			stuck.Store(true)
		}
	}
	st.after.Store(&hook)
	res, err := pub.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	st.after.Store(nil)
	require.True(t, ran.Load(), "the hook ran")
	require.False(t, stuck.Load(), "the steps in the window waited for the append")
	w := <-done
	id, seq := res.Message.ID, res.Message.Sequence

	all, err := e.Receipts(ctx, id, pigeon.WithMaxReceipts(-1))
	require.NoError(t, err)
	require.Len(t, all, 3, "the uncapped answer: three deliveries")

	if w.err != nil {
		require.ErrorIs(t, w.err, pigeon.ErrReceiptsTruncated)
	}
	require.LessOrEqual(t, len(w.first), 1)
	require.Equal(t, append([]pigeon.Receipt{}, all[:len(w.first)]...), append([]pigeon.Receipt{}, w.first...), "what the page in the window answered is the front of every later answer")
	got := append([]pigeon.Receipt(nil), w.first...)
	var after pigeon.ReceiptCursor // from the start when the page answered nothing
	if len(w.first) > 0 {
		after = w.first[len(w.first)-1].Cursor()
	}
	rest, _ := pageReceiptsAfter(t, e, id, 1, after)
	got = append(got, rest...)
	require.Equal(t, all, got, "the pages hold every receipt, once, in order")

	recs, err := e.Audit(ctx, 1, 1000)
	require.NoError(t, err)
	accepted, delivered := -1, -1
	for i, r := range recs {
		switch {
		case r.Type == string(pigeon.EventPublishAccepted) && r.MessageID == id:
			accepted = i
		case r.Type == string(pigeon.EventDeliveryDispatched) && delivered < 0 && seqsList(r.Seqs, seq):
			delivered = i
		}
	}
	require.GreaterOrEqual(t, accepted, 0, "the acceptance is in the chain")
	require.GreaterOrEqual(t, delivered, 0, "the delivery is in the chain")
	require.Less(t, accepted, delivered, "the acceptance precedes the first delivery in the chain")
	require.Equal(t, "1-2", recs[delivered].Seqs, "the first delivery lists both messages")
	require.Equal(t, recs[delivered].Seq, all[0].AuditSeq, "and is the first receipt")
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// inAppendWindow is what happens while message m (k-1, the second of the
// subject) is being appended: the worker receives both messages (one
// record listing the two), the first one again, settled at once, and m
// alone twice, each lease left to expire; then the auditor reads m's
// first page of receipts, of one. No step waits for an audit write: a
// delivery is recorded without waiting.
func inAppendWindow(f *fixture, worker pigeon.Session, subject string, m store.Message) windowPage {
	leaseGone := func() { f.clock.Advance(2 * time.Minute) } // past the ack wait and the retry's delay
	got, err := worker.Receive(ctx, subject, 2)
	if err == nil && len(got) != 2 {
		err = errors.New("the worker did not receive both messages")
	}
	if err != nil {
		return windowPage{err: err}
	}
	leaseGone()
	settled, err := f.e.ReceiveSettled(ctx, callerOf(worker), subject, 1)
	if err == nil && (len(settled) != 1 || settled[0].ID == m.ID) {
		err = errors.New("the worker did not settle the first message alone")
	}
	if err != nil {
		return windowPage{err: err}
	}
	for range 2 {
		leaseGone()
		alone, err := worker.Receive(ctx, subject, 1)
		if err == nil && (len(alone) != 1 || alone[0].ID != m.ID) {
			err = errors.New("the worker did not receive the message alone")
		}
		if err != nil {
			return windowPage{err: err}
		}
	}
	first, err := f.e.Receipts(ctx, m.ID, pigeon.WithMaxReceipts(1))
	return windowPage{first: first, err: err}
}

// seqsList reports whether the sequences seqs lists include seq.
func seqsList(seqs string, seq uint64) bool {
	in := false
	store.WalkSeqs(seqs, func(lo, hi uint64) bool {
		in = lo <= seq && seq <= hi
		return !in
	})
	return in
}
