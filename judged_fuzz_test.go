package pigeon_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/jsontext"
)

// judgedEngine is an engine whose last gate keeps the value it judged for
// each message id.
type judgedEngine struct {
	e      *pigeon.Engine
	sess   pigeon.Session
	mu     sync.Mutex
	judged map[string]any
}

func newJudgedEngine(t testing.TB) *judgedEngine {
	j := &judgedEngine{judged: map[string]any{}}
	keep := pigeon.GateFunc("keep", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
		j.mu.Lock()
		j.judged[a.Message.ID] = a.Data
		j.mu.Unlock()
		return pigeon.Allow()
	})
	const who = "spiffe://test/fuzz"
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: who}),
		Gates:         []pigeon.Gate{keep},
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "fuzz.data", Version: "v1", Intents: []string{"test"},
			Data: pigeon.DataPolicy{ForbiddenFields: []string{"card.pan"}, TokenizedFields: []string{"token"}},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{who}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{who}}},
			},
		}}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	j.e = e
	j.sess, err = e.Connect(context.Background(), "t", []string{"fuzz.data"})
	require.NoError(t, err)
	return j
}

// check publishes m and, when it is accepted, requires that the message a
// receiver gets decodes, with encoding/json, to exactly the value the gates
// judged, and that its text is unambiguous.
func (j *judgedEngine) check(t *testing.T, m *pigeon.Message) {
	res, err := j.sess.Publish(context.Background(), m)
	if err != nil {
		require.NotEqual(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
		return
	}
	j.mu.Lock()
	judged, ok := j.judged[res.Message.ID]
	delete(j.judged, res.Message.ID)
	j.mu.Unlock()
	require.True(t, ok, "accepted without passing the gates")
	got, err := j.sess.Receive(context.Background(), "fuzz.data", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, res.Message.ID, got[0].ID)
	raw, err := json.Marshal(got[0]) // the bytes a remote receiver reads
	require.NoError(t, err)
	require.NoError(t, jsontext.Validate(raw, 1000), "delivered text is ambiguous: %q", raw)
	var env struct{ Data any }
	require.NoError(t, json.Unmarshal(raw, &env))
	require.True(t, reflect.DeepEqual(judged, env.Data), "judged %#v, delivered %#v", judged, env.Data)
}

// FuzzJudgedIsDelivered is the differential test of the promise that what a
// receiver gets is exactly what the gates judged: random data (duplicate
// keys, odd escapes, deep nesting, odd numbers), in process and through
// the edge's envelope decoder.
func FuzzJudgedIsDelivered(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `{"token":"4111111111111111","token":"tok_abc"}`, `{"card":{"pan":null,"pan":"4111111111111111"}}`,
		`{"a":"\u0061","\u0061":2}`, `{"x":"\ud83d\ude00","y":"\ud800"}`, "{\"s\":\"\xff\"}", `[1,[2,[3,[4]]]]`,
		`{"n":-0,"m":1e308,"o":12345678901234567890,"p":0.1e-400}`, `{"e":"\/\b\f\n\r\t\"\\"}`, ` {"a" : [ ] , "b" : { } } `,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	j := newJudgedEngine(f)
	f.Fuzz(func(t *testing.T, data []byte, edge bool) {
		m := &pigeon.Message{Type: "t", Subject: "fuzz.data", Intent: "test", Data: json.RawMessage(data)}
		if edge {
			env := []byte(`{"type":"t","subject":"fuzz.data","intent":"test","data":`)
			env = append(append(env, data...), '}')
			var err error
			if m, err = pigeon.DecodeMessage(env); err != nil {
				return // refused at the edge
			}
		}
		j.check(t, m)
	})
}
