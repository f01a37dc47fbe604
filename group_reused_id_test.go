package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// TestReusedIDLateSuccessAndRetry: a consumer group's subscriber handles
// job-x (job 1) while retention trims it and a newer message takes its
// id (job 2, another sequence); both handlers run at once
// (WithMaxInFlight). The first one's late success and the newer one's
// failure (RetryAfter(0)) are settled by sequence, in whichever order
// they come: the success marks job 1 done, the failure gives job 2 back
// at once, and job 2 comes again (attempt 2, at its sequence), never held
// until jobs.batch's ack wait of an hour. Each case drives one order.
func TestReusedIDLateSuccessAndRetry(t *testing.T) {
	cases := []struct {
		name string
		// answer lets the two handlers return, in the case's order,
		// waiting for each step to be settled as the case needs it.
		answer func(t *testing.T, r *reusedRun)
	}{
		{"the late success settled first", func(t *testing.T, r *reusedRun) {
			close(r.release[0])
			r.requireDone(t, r.seqs[0], "the late success of job 1 is settled")
			close(r.release[1])
			r.requireNext(t, handedJob{r.seqs[1], 2}, "job 2 comes again after its failure")
		}},
		{"the failure settled first", func(t *testing.T, r *reusedRun) {
			close(r.release[1])
			r.requireNext(t, handedJob{r.seqs[1], 2}, "job 2 comes again while job 1's handler still runs")
			close(r.release[0])
			r.requireDone(t, r.seqs[0], "the late success of job 1 is settled")
		}},
		{"both answered at once", func(t *testing.T, r *reusedRun) {
			close(r.release[0])
			close(r.release[1])
			r.requireNext(t, handedJob{r.seqs[1], 2}, "job 2 comes again after its failure")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := startReusedRun(t)
			tc.answer(t, r)
			r.requireDone(t, r.seqs[0], "job 1 is done")
			r.requireDone(t, r.seqs[1], "job 2 is done once its second attempt succeeded")
			select {
			case d := <-r.deliveries:
				t.Fatalf("a delivery beyond the expected ones: %+v", d)
			default:
			}
		})
	}
}

// handedJob is one delivery a reusedRun's handler was handed.
type handedJob struct {
	seq     uint64
	attempt int
}

// reusedRun is a crew subscriber of jobs.batch (an ack wait of an hour,
// on a clock that does not move) in group crew, handling job 1 and job 2,
// both published under the id job-x, job 1 trimmed before job 2 came.
// The first attempt of job n waits for release[n-1]; job 2's fails
// (RetryAfter(0)), job 1's succeeds; later attempts succeed at once.
type reusedRun struct {
	st         *memory.Store
	deliveries chan handedJob
	release    [2]chan struct{}
	seqs       [2]uint64
}

func startReusedRun(t *testing.T) *reusedRun {
	t.Helper()
	r := &reusedRun{
		st:         memory.New(nil),
		deliveries: make(chan handedJob, 8),
		release:    [2]chan struct{}{make(chan struct{}), make(chan struct{})},
	}
	t.Cleanup(func() { require.NoError(t, r.st.Close(ctx)) })
	f := newFixture(t, func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog, o.Authenticator, o.Store = base.Catalog, base.Authenticator, r.st
	})
	boss := f.connect("boss-token", "jobs.batch")
	crew := f.connect("crew-token", "jobs.batch")
	sub, err := crew.Subscribe(ctx, "jobs.batch", func(ctx context.Context, d *pigeon.Delivery) error {
		r.deliveries <- handedJob{d.Message.Sequence, d.Attempt}
		if d.Attempt > 1 {
			return nil
		}
		var job struct{ N int }
		if err := json.Unmarshal(d.Message.Data, &job); err != nil || job.N < 1 || job.N > 2 {
			return errors.New("not one of the two jobs")
		}
		select {
		case <-r.release[job.N-1]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if job.N == 2 {
			return pigeon.RetryAfter(0, errors.New("job 2 fails once"))
		}
		return nil
	}, pigeon.WithGroup("crew"), pigeon.WithMaxInFlight(2))
	require.NoError(t, err)
	t.Cleanup(func() {
		// A case that failed part-way leaves handlers waiting.
		for _, c := range r.release {
			select {
			case <-c:
			default:
				close(c)
			}
		}
		require.NoError(t, sub.Unsubscribe(ctx))
	})

	publish := func(n int) uint64 {
		m := &pigeon.Message{Type: "job", Subject: "jobs.batch", Intent: "run", ID: "job-x", Data: json.RawMessage(`{"n":` + itoa(n) + `}`)}
		res, err := boss.Publish(ctx, m)
		require.NoError(t, err)
		require.Equal(t, "accepted", res.Status)
		return res.Message.Sequence
	}
	r.seqs[0] = publish(1)
	r.requireNext(t, handedJob{r.seqs[0], 1}, "job 1 is handed over")
	_, err = r.st.TrimThrough(ctx, "jobs.batch", r.seqs[0])
	require.NoError(t, err)
	r.seqs[1] = publish(2)
	require.NotEqual(t, r.seqs[0], r.seqs[1])
	r.requireNext(t, handedJob{r.seqs[1], 1}, "job 2 is handed over while job 1's handler runs")
	return r
}

// requireNext requires want to be the next delivery.
func (r *reusedRun) requireNext(t *testing.T, want handedJob, msg string) {
	t.Helper()
	select {
	case got := <-r.deliveries:
		require.Equal(t, want, got, msg)
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery came: %s", msg)
	}
}

// requireDone waits for seq to be done for group crew in the store.
func (r *reusedRun) requireDone(t *testing.T, seq uint64, msg string) {
	t.Helper()
	key := store.GroupKey{Subject: "jobs.batch", Group: "crew"}
	require.Eventually(t, func() bool {
		st, err := r.st.LoadGroup(ctx, key)
		return err == nil && st.IsDone(seq)
	}, 10*time.Second, time.Millisecond, msg)
}
