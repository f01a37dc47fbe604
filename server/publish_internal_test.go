package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// publishBodies are publish bodies on both sides of every check the
// request path makes before the engine judges the message.
var publishBodies = []string{
	`{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",` +
		`"idempotencyKey":"k1","classification":"pci","data":{"merchantId":"m-100","orderId":"o-1","amount":42.5,` +
		`"currency":"GBP","paymentToken":"tok_9f8e7d6c"}}`,
	`{}`,
	`{"id":"a","data":{"a":[1,2,{"b":null}]},"signature":{"kid":"k","alg":"ed25519","sig":"s"},"sequence":3}`,
	`{"data":null}`,
	`{"ID":"a"}`,
	`{"id":"a\u0062"}`,
	`{"id":1}`,
	`{"sequence":-1}`,
	`{"signature":"x"}`,
	`{"id":"a","id":"b"}`,
	`{"data":{"amount":"x","amount":42.5}}`,
	"{\"id\":\"a\xffb\"}",
	`{"data":{"a":"\ud800"}}`,
	`[1]`,
	`"x"`,
	`42`,
	`[1,1`,
	`{"id":"a"`,
	`{"id":"a"} x`,
	`{"id":"a",}`,
	"{\"id\":\"a\nb\"}",
	`{"data":` + strings.Repeat(`[`, 71) + strings.Repeat(`]`, 71) + `}`,
	`{"data":` + strings.Repeat(`[`, 72) + strings.Repeat(`]`, 72) + `}`,
	strings.Repeat(`[`, 80) + strings.Repeat(`]`, 80),
	`[{"a":1,"a":2}]`,
	"[\"\xff\"]",
}

// decodePublishBefore is the publish path as it read bodies before the
// one-pass decoder: readBody's checks, then pigeon.DecodeMessage.
func decodePublishBefore(b []byte) (*pigeon.Message, error) {
	if err := pigeon.CheckJSON(b); err != nil {
		return nil, err
	}
	return pigeon.DecodeMessage(b)
}

func requireSamePublishDecoding(t *testing.T, in []byte) {
	t.Helper()
	b := bytes.TrimSpace(in)
	if len(b) == 0 {
		return // refused as "a JSON body is required" before either
	}
	want, wantErr := decodePublishBefore(b)
	got, err := decodePublish(b)
	if wantErr != nil {
		require.Error(t, err, "accepted %q, refused before: %v", b, wantErr)
		require.Equal(t, pigeon.ErrorCode(wantErr), pigeon.ErrorCode(err), "%q", b)
		require.Equal(t, wantErr.Error(), err.Error(), "%q", b)
		return
	}
	require.NoError(t, err, "%q", b)
	require.Equal(t, want, got.Clone(), "%q", b) // Clone: without the data decoded with it
}

func TestDecodePublishAgrees(t *testing.T) {
	for _, in := range publishBodies {
		requireSamePublishDecoding(t, []byte(in))
	}
}

// FuzzDecodePublish holds the publish path's decoding to what it was: the
// same message, or the same code and message, for any body.
func FuzzDecodePublish(f *testing.F) {
	for _, in := range publishBodies {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		requireSamePublishDecoding(t, in)
	})
}
