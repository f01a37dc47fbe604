package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// quorumStore is a memory store that, while down, fails appends and reads
// as a replicated store without a quorum does.
type quorumStore struct {
	*memory.Store
	down    atomic.Bool
	refused atomic.Int64 // reads refused while down
}

func (q *quorumStore) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if q.down.Load() {
		return store.Message{}, false, store.ErrNoQuorum
	}
	return q.Store.Append(ctx, m)
}

func (q *quorumStore) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	if q.down.Load() {
		q.refused.Add(1)
		return nil, store.ErrNoQuorum
	}
	return q.Store.Read(ctx, subject, from, max)
}

// A store without a quorum refuses publishes with the retryable
// STORE_NO_QUORUM, and a running subscription waits for it rather than
// stop.
func TestStoreWithoutQuorum(t *testing.T) {
	qs := &quorumStore{Store: memory.New(nil)}
	o := transporttest.Options()
	o.Store = qs
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	ctx := t.Context()
	boss, err := e.Connect(ctx, "boss-token", []string{"jobs.run"})
	require.NoError(t, err)
	crew, err := e.Connect(ctx, "crew-token", []string{"jobs.run"})
	require.NoError(t, err)
	job := &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)}

	qs.down.Store(true)
	_, err = boss.Publish(ctx, job)
	requireCode(t, err, pigeon.CodeStoreNoQuorum)
	require.ErrorIs(t, err, pigeon.ErrStore)

	got := make(chan string, 1)
	sub, err := crew.Subscribe(ctx, "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message.ID
		return nil
	})
	require.NoError(t, err)
	// The subscription reads, is refused, and reads again: it waits.
	refused := qs.refused.Load()
	require.Eventually(t, func() bool { return qs.refused.Load() >= refused+3 }, 30*time.Second, time.Millisecond,
		"the subscription reads again after a refusal")
	select {
	case <-sub.Done():
		t.Fatalf("the subscription stopped: %v", sub.Err())
	default:
	}

	qs.down.Store(false)
	res, err := boss.Publish(ctx, job)
	require.NoError(t, err)
	select {
	case id := <-got:
		require.Equal(t, res.Message.ID, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not delivered once the quorum was back")
	}
}
