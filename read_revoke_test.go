package pigeon_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// stallingStore is a memory store whose next Read of a subject, once
// armed, says so on reading and waits for go before it reads: a read
// that waits on the disk.
type stallingStore struct {
	store.Store
	armed   atomic.Pointer[string]
	reading chan struct{}
	goOn    chan struct{}
}

func (s *stallingStore) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	if p := s.armed.Load(); p != nil && *p == subject && s.armed.CompareAndSwap(p, nil) {
		close(s.reading)
		<-s.goOn
	}
	return s.Store.Read(ctx, subject, from, max)
}

// TestReadsHandOverWhatTheContractStillAllows: a pull receive or a replay
// whose contract is revoked while its read waits on the store hands over
// nothing, is refused CONTRACT_REVOKED and audited so, and leaves what it
// read where it was: a pubsub cursor does not move, work-queue leases are
// given back at once (not after the ack wait, an hour here), and a fresh
// contract reads the same messages.
func TestReadsHandOverWhatTheContractStillAllows(t *testing.T) {
	for _, tc := range []struct {
		name, pubToken, readToken, subject string
		msg                                func(i int) *pigeon.Message
		read                               func(s pigeon.Session, subject string) ([]*pigeon.Message, error)
		denied                             pigeon.Event
		again                              bool // a fresh contract reads the same messages
	}{
		{"pubsub receive", "alice-token", "bob-token", "chat.messages", chat, receive, pigeon.EventReceiveDenied, true},
		{"work queue receive", "boss-token", "crew-token", "jobs.batch", job("jobs.batch"), receive, pigeon.EventReceiveDenied, true},
		{"replay", "orders-token", "notify-replay-token", "notifications.send", func(i int) *pigeon.Message {
			return demo.Notification("k-" + strconv.Itoa(i))
		}, func(s pigeon.Session, subject string) ([]*pigeon.Message, error) {
			return s.Replay(ctx, pigeon.ReplayRequest{Subject: subject, Reason: "audit"})
		}, pigeon.EventReplayDenied, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &stallingStore{Store: memory.New(nil), reading: make(chan struct{}), goOn: make(chan struct{})}
			opts := transporttest.Options()
			opts.Store = st
			e, err := pigeon.New(ctx, opts)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			pub := chatSession(t, e, tc.pubToken, tc.subject)
			const n = 3
			for i := range n {
				res, err := pub.Publish(ctx, tc.msg(i))
				require.NoError(t, err)
				require.Equal(t, pigeon.StatusAccepted, res.Status)
			}

			reader := chatSession(t, e, tc.readToken, tc.subject)
			st.armed.Store(&tc.subject)
			type result struct {
				msgs []*pigeon.Message
				err  error
			}
			done := make(chan result, 1)
			go func() {
				msgs, err := tc.read(reader, tc.subject)
				done <- result{msgs, err}
			}()
			<-st.reading
			k := reader.Contract()
			require.NoError(t, e.RevokeContract(ctx, &pigeon.Principal{ID: k.Principal()}, k.ID()))
			close(st.goOn)
			res := <-done
			require.Empty(t, res.msgs)
			require.Equal(t, pigeon.CodeContractRevoked, pigeon.ErrorCode(res.err), "%v", res.err)
			require.Equal(t, 1, auditCount(t, e, tc.denied, pigeon.CodeContractRevoked))
			for _, ev := range []pigeon.Event{pigeon.EventDeliveryDispatched, pigeon.EventReplayExecuted} {
				require.Empty(t, auditOf(t, e, ev), "nothing was handed over")
			}

			if tc.again {
				fresh := chatSession(t, e, tc.readToken, tc.subject)
				got, err := tc.read(fresh, tc.subject)
				require.NoError(t, err)
				require.Len(t, got, n, "what the refused read took is read again at once")
			}
		})
	}
}

// TestReplayIsRecordedWithWhatItReturned: a replay's record names the
// messages it handed over as a delivery record does (sequences, count,
// digest of their ids) and keeps the reason given, so the receipts of a
// message list the replays that returned it. A reason longer than
// MaxReason, or not UTF-8, is refused before anything is read.
func TestReplayIsRecordedWithWhatItReturned(t *testing.T) {
	e := chatEngine(t)
	orders := chatSession(t, e, "orders-token", "notifications.send")
	var ids []string
	for i := range 3 {
		res, err := orders.Publish(ctx, demo.Notification("k-"+strconv.Itoa(i)))
		require.NoError(t, err)
		ids = append(ids, res.Message.ID)
	}
	ops := chatSession(t, e, "notify-replay-token", "notifications.send")
	reason := strings.Repeat("é", pigeon.MaxReason/2) // the longest kept whole
	got, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: reason, FromSequence: 2})
	require.NoError(t, err)
	require.Len(t, got, 2)

	recs := auditOf(t, e, pigeon.EventReplayExecuted)
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, "2-3", r.Seqs)
	require.Equal(t, 2, r.Count)
	require.Equal(t, pigeon.DeliveryDigest(ids[1:]), r.Digest)
	require.Equal(t, reason, r.Ref)
	require.Equal(t, demo.NotifyReplay, r.Principal)

	rs, err := e.Receipts(ctx, ids[2])
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, pigeon.EventReplayExecuted, rs[0].Event)
	require.Equal(t, demo.NotifyReplay, rs[0].Principal)
	require.Equal(t, uint64(3), rs[0].Seq)
	rs, err = e.Receipts(ctx, ids[0])
	require.NoError(t, err)
	require.Empty(t, rs, "the replay did not return the first message")

	for _, tc := range []struct {
		name, reason string
		code         pigeon.Code
	}{
		{"too long", reason + "x", pigeon.CodeBadRequest},
		{"not UTF-8", "why\xff", pigeon.CodeInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: tc.reason})
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%v", err)
			require.Equal(t, 1, auditCount(t, e, pigeon.EventReplayDenied, tc.code))
		})
	}
	require.Len(t, auditOf(t, e, pigeon.EventReplayExecuted), 1)

	// An empty replay is recorded too, naming no message.
	got, err = ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "nothing new", FromSequence: 9})
	require.NoError(t, err)
	require.Empty(t, got)
	recs = auditOf(t, e, pigeon.EventReplayExecuted)
	require.Len(t, recs, 2)
	require.Zero(t, recs[1].Count)
	require.Equal(t, "nothing new", recs[1].Ref)
}

func receive(s pigeon.Session, subject string) ([]*pigeon.Message, error) {
	return s.Receive(ctx, subject, 10)
}

func job(subject string) func(i int) *pigeon.Message {
	return func(i int) *pigeon.Message {
		return &pigeon.Message{Type: "job", Subject: subject, Intent: "run", Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
	}
}
