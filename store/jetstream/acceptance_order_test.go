package jetstream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/store"
)

// appendHooked is the JetStream store, whose Append runs after once
// JetStream acknowledged the message (the store's Append returned) and
// before it answers the engine: the moment in which every reader of the
// stream has the message and the engine does not.
type appendHooked struct {
	*Store
	after atomic.Pointer[func(store.Message)]
}

func (s *appendHooked) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	got, dup, err := s.Store.Append(ctx, m)
	if h := s.after.Load(); h != nil && err == nil && !dup {
		(*h)(got)
	}
	return got, dup, err
}

// TestAcceptanceBeforeDeliveryThroughJetStream: the JetStream store
// learns a message's sequence from JetStream's acknowledgement, so the
// engine queues its acceptance record once Append returned. A worker
// receives the message three times before that (first with the message
// before it: one record listing both), and an auditor reads the
// message's first page of receipts, of one, in that moment. The
// acceptance's place was taken before the append: in the chain the
// acceptance precedes the deliveries, what the page answered is the front
// of every later answer, and the pages after it hold the rest, once.
// Queued after the append, the acceptance followed the three deliveries,
// and the page answered the second, leaving the first out for good.
func TestAcceptanceBeforeDeliveryThroughJetStream(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true})
	require.NoError(t, err)
	st := &appendHooked{Store: s}
	clk := testclock.New(time.Now().UTC().Truncate(time.Second))
	o := clusterOptions()
	o.Store, o.Now = st, clk.Now
	e, err := pigeon.New(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	boss, err := e.Connect(ctx, "boss-token", []string{"jobs.cluster"})
	require.NoError(t, err)
	crew, err := e.Connect(ctx, "crew-token", []string{"jobs.cluster"})
	require.NoError(t, err)
	crewCaller := caller(t, "crew-token", crew)
	const subject = "jobs.cluster"
	_, err = boss.Publish(ctx, jobMsg(0))
	require.NoError(t, err)

	type windowPage struct {
		first []pigeon.Receipt
		err   error
	}
	inWindow := func(m store.Message) windowPage {
		leaseGone := func() { clk.Advance(time.Minute) } // past the ack wait and the retry's delay
		got, err := crew.Receive(ctx, subject, 2)
		if err == nil && len(got) != 2 {
			err = errors.New("the crew did not receive both messages")
		}
		if err != nil {
			return windowPage{err: err}
		}
		leaseGone()
		settled, err := e.ReceiveSettled(ctx, crewCaller, subject, 1)
		if err == nil && (len(settled) != 1 || settled[0].ID == m.ID) {
			err = errors.New("the crew did not settle the first message alone")
		}
		if err != nil {
			return windowPage{err: err}
		}
		for range 2 {
			leaseGone()
			alone, err := crew.Receive(ctx, subject, 1)
			if err == nil && (len(alone) != 1 || alone[0].ID != m.ID) {
				err = errors.New("the crew did not receive the message alone")
			}
			if err != nil {
				return windowPage{err: err}
			}
		}
		first, err := e.Receipts(ctx, m.ID, pigeon.WithMaxReceipts(1))
		return windowPage{first: first, err: err}
	}

	var ran, stuck atomic.Bool
	done := make(chan windowPage, 1)
	hook := func(m store.Message) {
		if !ran.CompareAndSwap(false, true) {
			return
		}
		go func() { done <- inWindow(m) }()
		select { // the steps never wait for the append: that would be a deadlock
		case w := <-done:
			done <- w
		case <-time.After(30 * time.Second):
			stuck.Store(true)
		}
	}
	st.after.Store(&hook)
	res, err := boss.Publish(ctx, jobMsg(1))
	require.NoError(t, err)
	st.after.Store(nil)
	require.True(t, ran.Load(), "the hook ran")
	require.False(t, stuck.Load(), "the steps in the window waited for the append")
	w := <-done
	id := res.Message.ID

	all, err := e.Receipts(ctx, id, pigeon.WithMaxReceipts(-1))
	require.NoError(t, err)
	require.Len(t, all, 3, "the uncapped answer: three deliveries")
	if w.err != nil {
		require.ErrorIs(t, w.err, pigeon.ErrReceiptsTruncated)
	}
	require.LessOrEqual(t, len(w.first), 1)
	require.Equal(t, append([]pigeon.Receipt{}, all[:len(w.first)]...), append([]pigeon.Receipt{}, w.first...),
		"what the page in the window answered is the front of every later answer")
	got := append([]pigeon.Receipt(nil), w.first...)
	var after pigeon.ReceiptCursor // from the start when the page answered nothing
	if len(w.first) > 0 {
		after = w.first[len(w.first)-1].Cursor()
	}
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 10, "paging does not end")
		rs, err := e.Receipts(ctx, id, pigeon.WithMaxReceipts(1), pigeon.WithReceiptsAfter(after))
		got = append(got, rs...)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, pigeon.ErrReceiptsTruncated)
		after = rs[len(rs)-1].Cursor()
	}
	require.Equal(t, all, got, "the pages hold every receipt, once, in order")

	recs, err := e.Audit(ctx, 1, 1000)
	require.NoError(t, err)
	accepted := -1
	for i, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) && r.MessageID == id {
			accepted = i
		}
	}
	require.GreaterOrEqual(t, accepted, 0, "the acceptance is in the chain")
	require.Less(t, recs[accepted].Seq, all[0].AuditSeq, "the acceptance precedes the first delivery in the chain")
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
}
