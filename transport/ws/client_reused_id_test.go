package ws_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// A message id names one message at a time only: once retention trims a
// message, a later one may be published, and delivered, under its id. A
// subscription with WithMaxInFlight above 1 parked a delivery behind the
// running handler of any message with its id, so the newer message waited
// for the old one's handler (which may run for as long as it likes). A
// delivery is now parked only behind a run of the same message (id and
// sequence): the newer one runs at once, and each is acked with its own
// sequence. A redelivery of the running message itself still waits (see
// TestARedeliveryWaitsForTheRunningHandlerOfItsMessage).
func TestANewerMessageUnderAReusedIDDoesNotWaitForTheOldHandler(t *testing.T) {
	srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return []string{
				subscribedFrame(f, "s1"),
				deliverSeq("s1", "1", 7),
				deliverSeq("s1", "1", 9), // msg_1@7 trimmed, its id taken
			}
		case ws.OpNegotiate:
			return nil
		}
		return []string{okFrame(f)}
	})
	s := srv.dial(t)
	entered, release, newer := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	_, err := s.Subscribe(context.Background(), "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		switch d.Message.Sequence {
		case 7:
			close(entered)
			<-release // the old message's handler outlives the newer delivery
		case 9:
			close(newer)
		}
		return nil
	}, pigeon.WithMaxInFlight(4))
	require.NoError(t, err)
	within(t, entered, "the handler of msg_1 at 7")
	within(t, newer, "the handler of msg_1 at 9 while the one at 7 still runs")
	close(release)
	eventually(t, func() bool { return len(ackedSeqs(srv, "msg_1")) == 2 }, "both messages acked")
	require.ElementsMatch(t, []uint64{7, 9}, ackedSeqs(srv, "msg_1"), "each ack names its own message's sequence")
}

// ackedSeqs is the sequence of every ack of id the server was sent.
func ackedSeqs(srv *connServer, id string) []uint64 {
	var seqs []uint64
	for _, f := range srv.seen(ws.OpAck) {
		if f.f.MessageID == id {
			seqs = append(seqs, f.f.Sequence)
		}
		for i, x := range f.f.MessageIDs {
			if x == id && i < len(f.f.Sequences) {
				seqs = append(seqs, f.f.Sequences[i])
			}
		}
	}
	return seqs
}
