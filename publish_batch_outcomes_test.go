package pigeon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/wal"
)

// shortBatchStore is a write-ahead log whose batch append answers fewer
// outcomes than it was given messages (none), against BatchAppender's
// promise of one per message.
type shortBatchStore struct{ *wal.Store }

func (shortBatchStore) AppendAcceptedBatch(context.Context, []store.Message, []store.AuditRecord) []store.Appended {
	return nil
}

// TestPublishBatchStoreAnswersTooFewOutcomes: a store that answers a batch
// append with fewer outcomes than messages fails each message of the
// batch with an error, and PublishBatch returns (before, it handed the
// same messages to the store again without end).
func TestPublishBatchStoreAnswersTooFewOutcomes(t *testing.T) {
	e, st := openDurable(t, t.TempDir(), nil, func(o *pigeon.Options) {
		o.Store = shortBatchStore{o.Store.(*wal.Store)}
	})
	defer closeDurable(t, e, st)
	s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	who, err := e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	caller := pigeon.Caller{Principal: who, Region: "uk", ContractID: s.Contract().ID()}

	got := e.PublishBatch(ctx, caller, []*pigeon.Message{demo.Payment("o-1"), demo.Payment("o-2"), demo.Payment("o-3")})
	require.Len(t, got, 3)
	for i, p := range got {
		require.Error(t, p.Err, "message %d", i)
		require.Nil(t, p.Result, "message %d", i)
	}
}
