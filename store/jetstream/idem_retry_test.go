package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// TestIdemRetryAfterIDReuseAnswersTheOriginal: a trimmed message's id is
// free again, so another message (another publisher's, or the same
// publisher's next) may be stored under it while the first one's
// idempotency key is still live. A retry of the first publish must be
// answered with the first message, as the memory store answers it: the
// claim names only the id, and the store answered with whatever message
// held the id now (another body, another key), and a kept copy of a
// second trimmed message under the id was never made, the first one's
// answering for both keys. The two stores are driven by the same calls
// and must agree.
func TestIdemRetryAfterIDReuseAnswersTheOriginal(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	js, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	mem := memory.New(nil)

	now := time.Now().UTC()
	exp := now.Add(time.Hour)
	msg := func(id, key, body string) store.Message {
		m := store.Message{Subject: "orders", ID: id, Time: now, Body: []byte(body)}
		if key != "" {
			m.IdemKey, m.IdemExpires = key, exp
		}
		return m
	}
	type answer struct {
		ID, Key, Body string
		Dup           bool
		Err           string
	}
	do := func(s store.Store, step func(context.Context, store.Store) (store.Message, bool, error)) answer {
		m, dup, err := step(ctx, s)
		a := answer{ID: m.ID, Key: m.IdemKey, Body: string(m.Body), Dup: dup}
		if err != nil {
			a = answer{Err: err.Error()}
		}
		return a
	}
	appendStep := func(m store.Message) func(context.Context, store.Store) (store.Message, bool, error) {
		return func(ctx context.Context, s store.Store) (store.Message, bool, error) { return s.Append(ctx, m) }
	}
	trimStep := func(ctx context.Context, s store.Store) (store.Message, bool, error) {
		_, last, err := s.Bounds(ctx, "orders")
		if err != nil {
			return store.Message{}, false, err
		}
		_, err = s.(store.SeqTrimmer).TrimThrough(ctx, "orders", last)
		return store.Message{}, false, err
	}
	steps := []struct {
		name string
		step func(context.Context, store.Store) (store.Message, bool, error)
	}{
		{"first X with key A", appendStep(msg("X", "A", "first"))},
		{"trim X", trimStep},
		{"second X, no key", appendStep(msg("X", "", "second"))},
		{"retry of A", appendStep(msg("X2", "A", "retry"))},
		{"trim second X", trimStep},
		{"retry of A after the second trim", appendStep(msg("X3", "A", "retry"))},
		{"third X with key B", appendStep(msg("X", "B", "third"))},
		{"trim third X", trimStep},
		{"retry of B", appendStep(msg("X4", "B", "retry"))},
		{"retry of A once more", appendStep(msg("X5", "A", "retry"))},
	}
	for _, st := range steps {
		want := do(mem, st.step)
		got := do(js, st.step)
		require.Equal(t, want, got, "step %q: the JetStream store answers otherwise than the memory store", st.name)
	}
}
