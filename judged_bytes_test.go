package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestJudgedBytesAreKept holds the engine to the bytes it judged when the
// publisher's buffer changes while its publish is under way (a caller
// reusing its buffer too early, or a racing writer): a gate after the
// built-in ones overwrites the publisher's data with other JSON of the
// same length, and replaces its signature's. What the store keeps, what a
// live subscriber gets and what a reader of the store gets are the bytes
// and the signature the gates judged; the publisher's result holds its
// own buffer, and writing to the result does not reach a subscriber.
func TestJudgedBytesAreKept(t *testing.T) {
	for _, tc := range []struct{ name, sent, overwrite string }{
		{"object", `{"text":"hello","n":1}`, `{"text":"HACKD","n":2}`},
		{"white space around", ` {"text":"hello"}` + "\n", ` {"text":"w0rld"}` + "\n"},
		{"invalid after", `{"text":"hello"}`, `{"text":"hello" `},
		{"array", `[1,2,3]`, `[4,5,6]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, tc.overwrite, len(tc.sent))
			buf := []byte(tc.sent)
			sig := &pigeon.Signature{KID: "k1", Alg: "ed25519", Sig: "c2ln"}
			var judged any
			overwrite := pigeon.GateFunc("overwrite", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
				judged = a.Data
				copy(buf, tc.overwrite)
				sig.Sig = "forged"
				return pigeon.Allow()
			})
			const who = "spiffe://test/writer"
			e, err := pigeon.New(context.Background(), &pigeon.Options{
				Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: who}),
				Gates:         []pigeon.Gate{overwrite},
				Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
					Name: "bytes", Version: "v1", Intents: []string{"test"},
					Policy: map[pigeon.Operation][]pigeon.RuleSpec{
						pigeon.OpPublish: {{Effect: "allow", Principals: []string{who}}},
						pigeon.OpReceive: {{Effect: "allow", Principals: []string{who}}},
					},
				}}},
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			s, err := e.Connect(ctx, "t", []string{"bytes"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			live := make(chan *pigeon.Message, 1)
			_, err = s.Subscribe(ctx, "bytes", func(_ context.Context, d *pigeon.Delivery) error {
				live <- d.Message
				return nil
			})
			require.NoError(t, err)

			res, err := s.Publish(ctx, &pigeon.Message{Type: "t", Subject: "bytes", Intent: "test", Data: buf, Signature: sig})
			require.NoError(t, err)
			require.Equal(t, pigeon.StatusAccepted, res.Status)
			require.Equal(t, tc.overwrite, string(res.Message.Data), "the result holds the publisher's own buffer")
			var want any
			require.NoError(t, json.Unmarshal([]byte(tc.sent), &want))
			require.Equal(t, want, judged)

			var got *pigeon.Message
			select {
			case got = <-live:
			case <-time.After(10 * time.Second):
				t.Fatal("no delivery")
			}
			require.JSONEq(t, tc.sent, string(got.Data), "live delivery")
			require.Equal(t, &pigeon.Signature{KID: "k1", Alg: "ed25519", Sig: "c2ln"}, got.Signature, "live delivery")
			copy(res.Message.Data, `xxxxxxxx`)
			stored, err := s.Receive(ctx, "bytes", 10)
			require.NoError(t, err)
			require.Len(t, stored, 1)
			require.JSONEq(t, tc.sent, string(stored[0].Data), "stored")
			require.Equal(t, "c2ln", stored[0].Signature.Sig, "stored")
			require.JSONEq(t, tc.sent, string(got.Data), "a write to the result reached the subscriber")
		})
	}
}
