package programs_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store/wal"
)

// recorder is a Middleware that counts the acknowledged deliveries of
// "events" by sequence. Deliveries above hold (when not 0) wait until
// their context ends and fail: the program is stopped mid-stream.
type recorder struct {
	hold  uint64
	mu    sync.Mutex
	acked map[uint64]int
}

func (r *recorder) mw(next pigeon.Handler) pigeon.Handler {
	return func(ctx context.Context, d *pigeon.Delivery) error {
		if d.Subject != "events" {
			return next(ctx, d)
		}
		if r.hold > 0 && d.Message.Sequence > r.hold {
			<-ctx.Done()
			return ctx.Err()
		}
		err := next(ctx, d)
		if err == nil {
			r.mu.Lock()
			r.acked[d.Message.Sequence]++
			r.mu.Unlock()
		}
		return err
	}
}

func (r *recorder) count(seq uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[seq]
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

func onEvents(m *programs.Manifest) {
	m.Route.Subject = "events"
	m.Route.MaxInFlight = 4
}

// A program on a pubsub route stopped mid-stream resumes, after a
// restart, at its stored position: every message accepted before the
// restart, including those accepted while no program was bound, is
// handled, and none at or below the position is handled again.
func TestRestartResumesPubSub(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func(r *recorder) *fixture {
		st, err := wal.Open(dir, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close(ctx) })
		return newFixture(t, st, r.mw)
	}
	var seqs []uint64
	publish := func(f *fixture, n int) {
		for i := range n {
			seqs = append(seqs, f.publish(t, "events", `{"n":`+strconv.Itoa(i)+`}`).Sequence)
		}
	}
	f := open(&recorder{})
	publish(f, 3) // before the deploy: not the program's
	first := &recorder{hold: seqs[2] + 10, acked: map[uint64]int{}}
	f.stop(t)
	require.NoError(t, f.st.Close(ctx))
	f = open(first)
	_, err := f.mg.Deploy(ctx, admin, "p", manifest(onEvents), modOK)
	require.NoError(t, err)
	publish(f, 20)
	eventually(t, func() bool { return first.len() == 10 }, "the first ten are handled")
	require.NoError(t, f.mg.Close(ctx), "stopped with four in flight and six waiting")
	publish(f, 5) // accepted while no program is bound
	raw, err := f.st.Get(ctx, "program-positions", "p")
	require.NoError(t, err)
	var pos struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
	}
	require.NoError(t, json.Unmarshal(raw, &pos))
	require.Equal(t, "events", pos.Subject)
	require.Equal(t, first.hold, pos.Seq, "the position is the last of the handled prefix")
	f.stop(t)
	require.NoError(t, f.st.Close(ctx))

	second := &recorder{acked: map[uint64]int{}}
	f = open(second)
	eventually(t, func() bool { return second.len() == 15 }, "the rest is handled after the restart")
	for _, s := range seqs[:3] {
		require.Zero(t, first.count(s)+second.count(s), "seq %d was published before the deploy", s)
	}
	for _, s := range seqs[3:13] {
		require.Equal(t, 1, first.count(s), "seq %d", s)
		require.Zero(t, second.count(s), "seq %d is at or below the position: not handled again", s)
	}
	for _, s := range seqs[13:] {
		require.Equal(t, 1, second.count(s), "seq %d is handled after the restart", s)
	}
}

// A swap that changes the binding (here the subjects the program may
// publish to) on a pubsub route hands the route over at a sequence: under
// load no message is lost or handled by both versions.
func TestRouteChangeHandover(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggedManager(t, f, programs.Options{})
	man := func(i int) programs.Manifest {
		return manifest(onEvents, func(m *programs.Manifest) {
			if i%2 == 1 {
				m.Publishes = []string{"orders.out", "orders.eu"}
			}
		})
	}
	_, err := mg.Deploy(ctx, admin, "p", man(0), modLog)
	require.NoError(t, err)
	const n, versions = 300, 6
	deployUnderLoad(t, f, mg, "events", n, versions, man)
	requireHandledOnce(t, logs, n, "every message is handled")
	require.Len(t, f.audited(t, pigeon.EventProgramSwapped), versions-1)
}

// A binding of a pubsub route whose contract ends is renewed at its
// position: under load no message is lost or handled twice.
func TestRenewalResumesPubSub(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggedManager(t, f, programs.Options{RebindDelay: 10 * time.Millisecond})
	in, err := mg.Deploy(ctx, admin, "p", manifest(onEvents), modLog)
	require.NoError(t, err)
	const n = 200
	for i := range n {
		f.publish(t, "events", `{"n":`+strconv.Itoa(i)+`}`)
		if i == n/2 {
			require.NoError(t, f.e.RevokeContract(ctx, &pigeon.Principal{ID: progAcc}, in.ContractID))
		}
	}
	requireHandledOnce(t, logs, n, "every message is handled")
	now, err := mg.Get(ctx, "p")
	require.NoError(t, err)
	require.NotEqual(t, in.ContractID, now.ContractID, "renewed")
}

// A handover whose new subscription fails binds the old version again at
// the same position: the deploy is refused and nothing is lost or handled
// twice.
func TestFailedHandoverResumes(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggedManager(t, f, programs.Options{})
	_, err := mg.Deploy(ctx, admin, "p", manifest(onEvents), modLog)
	require.NoError(t, err)
	const n = 100
	for i := range n {
		f.publish(t, "events", `{"n":`+strconv.Itoa(i)+`}`)
		if i == n/2 {
			_, err := mg.Deploy(ctx, admin, "p", manifest(onEvents, func(m *programs.Manifest) { m.Route.Filter = "message.data.n >" }), modOK)
			require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err))
			var pe *pigeon.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, string(pigeon.CodeFilterInvalid), pe.Details["cause"])
		}
	}
	requireHandledOnce(t, logs, n, "every message is handled by the running version")
	in, err := mg.Get(ctx, "p")
	require.NoError(t, err)
	require.True(t, in.Bound)
	require.Equal(t, 1, in.Version)
}
