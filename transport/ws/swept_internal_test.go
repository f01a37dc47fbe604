package ws

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// sweptFixture is a serverSub with no connection: what it records is
// which pending deliveries were settled, and how.
type sweptFixture struct {
	ss      *serverSub
	settled map[string][]error // by "id@seq", in order
}

func newSweptFixture() *sweptFixture {
	return &sweptFixture{ss: newServerSub(nil, pigeon.Caller{}, time.Hour, false), settled: map[string][]error{}}
}

// deliver makes the delivery of id at seq pending, its ack wait ending
// at deadline.
func (x *sweptFixture) deliver(id string, seq uint64, deadline time.Time) {
	key := id + "@" + strconv.FormatUint(seq, 10)
	x.ss.wait(id, inflight{done: func(err error) { x.settled[key] = append(x.settled[key], err) }, deadline: deadline, wire: new(wireState), seq: seq})
}

var (
	past   = time.Unix(1, 0)
	future = time.Unix(1<<40, 0)
)

// TestLateAnswerToASweptDeliveryDoesNotSettleANewerOne: once the ack
// wait of a delivery has swept it, the client's answer to it may still
// come, late. When a newer message has the id by then (the old one was
// trimmed and its id reused) and its delivery is pending, an answer that
// names no sequence (a v1 client's) cannot be told from the late answer
// and is refused; one naming the newer delivery's sequence settles it.
// A redelivery of the same message (the same sequence) still takes an
// answer without one, and the ids never swept are not touched.
func TestLateAnswerToASweptDeliveryDoesNotSettleANewerOne(t *testing.T) {
	cases := []struct {
		name  string
		then  uint64 // the sequence delivered under job-x after the sweep of sequence 1
		seq   uint64 // what the late answer names
		taken bool   // whether it settles the delivery of then
	}{
		{"ReusedIDAnswerWithoutSequence", 3, 0, false},
		{"ReusedIDAnswerOfTheOldSequence", 3, 1, false},
		{"ReusedIDAnswerOfItsSequence", 3, 3, true},
		{"RedeliveryAnswerWithoutSequence", 1, 0, true},
		{"RedeliveryAnswerOfItsSequence", 1, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := newSweptFixture()
			x.deliver("job-x", 1, past)
			x.deliver("other", 2, future)
			x.ss.sweepDue(time.Unix(2, 0))
			require.Equal(t, []error{errAckWait}, x.settled["job-x@1"])
			x.deliver("job-x", c.then, future)
			require.Equal(t, c.taken, x.ss.settle("job-x", c.seq, answer{ok: true}))
			got := x.settled["job-x@"+strconv.FormatUint(c.then, 10)]
			if c.taken {
				require.NotEmpty(t, got)
				require.NoError(t, got[len(got)-1], "settled as acked")
			} else {
				require.Empty(t, got, "still pending")
				require.True(t, x.ss.settle("job-x", c.then, answer{ok: true}), "the newer delivery still waits for its own answer")
			}
			require.True(t, x.ss.settle("other", 0, answer{ok: true}), "an id never swept takes an answer without a sequence")
		})
	}
}

// TestSweptDeliveriesInABatch: a batch answering a reused id without a
// sequence is refused for it, and the answer says which it refused.
func TestSweptDeliveriesInABatch(t *testing.T) {
	x := newSweptFixture()
	x.deliver("job-x", 1, past)
	x.ss.sweepDue(time.Unix(2, 0))
	x.deliver("job-x", 3, future)
	x.deliver("other", 2, future)
	stale, seqs := x.ss.settleAll([]string{"job-x", "other"}, nil, "", 0, answer{ok: true})
	require.Equal(t, []string{"job-x"}, stale)
	require.Equal(t, []uint64{0}, seqs)
	require.Empty(t, x.settled["job-x@3"])
	require.Equal(t, []error{nil}, x.settled["other@2"])
}

// TestSweptMemoryIsBounded: a subscription remembers at most maxSwept
// swept deliveries, each once, and forgets the oldest first: past the
// bound, the first one swept no longer marks a newer delivery of its id.
func TestSweptMemoryIsBounded(t *testing.T) {
	x := newSweptFixture()
	x.deliver("job-0", 1, past)
	x.ss.sweepDue(time.Unix(2, 0))
	x.deliver("job-0", 1, past) // a redelivery, swept again: remembered once
	x.ss.sweepDue(time.Unix(2, 0))
	require.Equal(t, 1, x.ss.swept.len())
	for i := 1; i < maxSwept; i++ {
		x.deliver("job-"+strconv.Itoa(i), uint64(i+1), past)
	}
	x.ss.sweepDue(time.Unix(2, 0))
	require.Equal(t, maxSwept, x.ss.swept.len())
	require.True(t, x.ss.swept.other("job-0", 99), "the first is still remembered at the bound")

	x.deliver("job-new", 5000, past)
	x.ss.sweepDue(time.Unix(2, 0))
	require.Equal(t, maxSwept, x.ss.swept.len(), "one past the bound forgets one")
	require.False(t, x.ss.swept.other("job-0", 99), "the oldest is forgotten")
	require.True(t, x.ss.swept.other("job-1", 99))
	require.True(t, x.ss.swept.other("job-new", 99))
	require.Len(t, x.ss.swept.has, maxSwept)
	require.Len(t, x.ss.swept.ids, maxSwept)

	// Going round the ring again keeps to the bound.
	for i := range 2 * maxSwept {
		x.deliver("again-"+strconv.Itoa(i), uint64(10000+i), past)
		x.ss.sweepDue(time.Unix(2, 0)) // one at a time: a sweep's order is the map's
	}
	require.Equal(t, maxSwept, x.ss.swept.len())
	require.Len(t, x.ss.swept.has, maxSwept)
	require.Len(t, x.ss.swept.ids, maxSwept)
	require.True(t, x.ss.swept.other("again-"+strconv.Itoa(2*maxSwept-1), 1))
	require.False(t, x.ss.swept.other("again-"+strconv.Itoa(maxSwept-1), 1))
}

// TestReplacedDeliveryIsRemembered: a pending delivery that a newer one
// of its id replaced is remembered as swept too: after the newer one is
// settled, a third delivery of the id at another sequence still refuses
// an answer without a sequence, which may be the first one's, late.
func TestReplacedDeliveryIsRemembered(t *testing.T) {
	x := newSweptFixture()
	x.deliver("job-x", 1, future)
	x.deliver("job-x", 3, future) // job-x@1 trimmed in flight, its id reused
	require.True(t, errors.Is(x.settled["job-x@1"][0], errAckWait))
	require.True(t, x.ss.settle("job-x", 3, answer{ok: true}))
	x.deliver("job-x", 5, future)
	require.False(t, x.ss.settle("job-x", 0, answer{ok: true}))
	require.True(t, x.ss.settle("job-x", 5, answer{ok: true}))
}
