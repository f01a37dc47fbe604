package programs_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A program.failed record names the message that failed by its sequence
// (Seqs) as well as its id, as the engine's records of one message do: a
// message id is the publisher's choice and, once retention freed it,
// names a newer message, so an auditor reading the id alone could not
// tell which message the program failed on.
func TestProgramFailedNamesTheSequence(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.mg.Deploy(context.Background(), admin, "fail", manifest(), modFail)
	require.NoError(t, err)
	want := map[string]string{}
	for i := range 2 {
		m := f.publish(t, "orders.in", `{"n":`+strconv.Itoa(i)+`}`)
		require.NotZero(t, m.Sequence)
		want[m.ID] = strconv.FormatUint(m.Sequence, 10)
	}
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 2 }, "both deliveries are exhausted")
	rs := f.audited(t, pigeon.EventProgramFailed)
	require.Len(t, rs, 4, "two attempts each")
	for _, r := range rs {
		require.Contains(t, want, r.MessageID)
		require.Equal(t, want[r.MessageID], r.Seqs, "the record of message %s", r.MessageID)
	}
}
