package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

const opI32Ne = 0x47

// A refused publish never answers 0, which means accepted: the answer is
// the bytes of the refusal's code written at errBuf, or the code's whole
// length when none could be written (errCap 0, errBuf outside the
// memory). A program that passed errCap 0 was told a message the broker
// refused had been accepted, and acknowledged its delivery: the message
// was lost without a trace in the program's own view. An errCap of 2³¹ or
// more (-1 as an i32) is as large as any code.
func TestRefusedPublishNeverAnswersAccepted(t *testing.T) {
	code := string(pigeon.CodeSubjectNotInContract)
	for _, tc := range []struct {
		name           string
		errBuf, errCap int64
		want           int64
	}{
		{"no buffer", 512, 0, int64(len(code))},
		{"a short buffer", 512, 3, 3},
		{"a large buffer", 512, 64, int64(len(code))},
		{"errCap -1", 512, -1, int64(len(code))},
		{"errCap 2^31", 512, -1 << 31, int64(len(code))},
		{"buffer outside memory", 1 << 20, 64, int64(len(code))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			// orders.eu is outside the program's contract: the publish is
			// refused SUBJECT_NOT_IN_CONTRACT. The handler acknowledges
			// the delivery exactly when publish answered want.
			msg := `{"type":"order","subject":"orders.eu","intent":"record","classification":"internal","data":{}}`
			const at = 16
			m := abiModule(cat(i32c(at), i32c(int64(len(msg))), i32c(tc.errBuf), i32c(tc.errCap), []byte{opCall, 0},
				i32c(tc.want), []byte{opI32Ne}), 1)
			m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
			m.data = []wdata{{offset: at, bytes: []byte(msg)}}
			_, err := f.mg.Deploy(context.Background(), admin, "p", manifest(), m.encode())
			require.NoError(t, err)
			f.publish(t, "orders.in", `{"n":1}`)
			eventually(t, func() bool {
				return len(f.ackedSeqs(t, "orders.in")) > 0 || len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) > 0
			}, "the delivery is handled")
			require.Zero(t, len(f.quarantined(t, pigeon.CodeDeliveryExhausted)), "publish answered another length than %d", tc.want)
			require.Equal(t, []uint64{1}, f.ackedSeqs(t, "orders.in"))
		})
	}
}
