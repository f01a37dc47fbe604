package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// reply answers the message being handled; on a work-queue or pubsub
// subject there is no request to answer, and the engine took the "reply"
// for a publish into the very subject the program handles: delivered
// back to the program, which replied again, without end (28,000 messages
// a second here from one message, its limits.maxEmits never reached).
// reply is refused INVALID_ARGUMENT there, audited publish.denied, and
// nothing is published; on a request/reply subject it answers as before
// (TestProgramsOverHTTP).
func TestReplyOutsideARequestDoesNotLoop(t *testing.T) {
	f := newFixture(t, nil)
	// The handler returns reply's answer: 0 (accepted) acknowledges the
	// delivery, a refusal fails it.
	_, err := f.mg.Deploy(context.Background(), admin, "r", manifest(),
		emitModule("reply", `{"type":"order","intent":"record","classification":"internal","data":{}}`))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool {
		return len(f.ackedSeqs(t, "orders.in")) > 0 || len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) > 0
	}, "the delivery is handled")
	require.Empty(t, f.ackedSeqs(t, "orders.in"), "the reply was refused: nothing to answer, nothing published")
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 1 }, "the delivery fails")
	var denied int
	for _, r := range f.audited(t, pigeon.EventPublishDenied) {
		if r.Code == string(pigeon.CodeInvalidArgument) && r.Ref == "program:r@1" {
			denied++
		}
	}
	require.Equal(t, 2, denied, "each attempt's refusal is audited")
	_, last, err := f.e.Bounds(context.Background(), "orders.in")
	require.NoError(t, err)
	require.EqualValues(t, 1, last, "orders.in holds the client's message alone")
}
