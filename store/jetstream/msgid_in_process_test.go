package jetstream

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// A retry under the deduplication id of a publish the stream is still
// proposing is answered 409 "duplicate message id is in process" (err_code
// 10158) while the stream has no quorum to settle the first: it is no
// quorum, which NotifyReply and every retrying writer try again on, not a
// refusal (the clean-clone CI saw a reply notice given up on it at once).
func TestMsgIDInProcessIsNoQuorum(t *testing.T) {
	s := &Store{}
	inProcess := &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}
	for _, err := range []error{inProcess, fmt.Errorf("nats: %w", inProcess)} {
		require.ErrorIs(t, s.fail(context.Background(), err), store.ErrNoQuorum, "%v", err)
	}
	other := &jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}
	require.NotErrorIs(t, s.fail(context.Background(), other), store.ErrNoQuorum)
	require.NotErrorIs(t, s.fail(context.Background(), nil), store.ErrNoQuorum)
}
