package ws_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// signedChat requires signatures on chat.messages.
func signedChat(o *pigeon.Options) {
	for i := range o.Catalog.Subjects {
		if p := &o.Catalog.Subjects[i]; p.Name == "chat.messages" {
			p.Integrity.Signature = "required"
		}
	}
}

// TestSignatureFormsOverWebSocket: a message signed in the second form
// (v 2, which covers type, intent, replyTo, …) crosses the WebSocket
// server and the Go client with its v, one publish or a batch, and the
// receiver verifies it; a first-form signature (no v) made before still
// passes and arrives without v; a v of another form is refused.
func TestSignatureFormsOverWebSocket(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, signedChat)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, err = v.e.CreateAccount(ctx, pigeon.Account{ID: transporttest.Alice})
	require.NoError(t, err)
	keys := []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-a", pub)}
	_, err = v.e.PutAccountKeys(ctx, transporttest.Alice, keys)
	require.NoError(t, err)

	got := make(chan *pigeon.Message, 8)
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	_, err = bob.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message
		return nil
	})
	require.NoError(t, err)
	alice := v.dial(t, "alice-token", []string{"chat.messages"})

	chat := func(text string) *pigeon.Message {
		return &pigeon.Message{Type: "chat.posted", Subject: "chat.messages", Intent: "chat", CorrelationID: "c-" + text,
			Data: json.RawMessage(`{"text":"` + text + `"}`)}
	}
	receive := func() *pigeon.Message {
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
			return nil
		}
	}

	// The second form, one publish.
	m := chat("one")
	require.NoError(t, pigeon.SignMessage(m, "sig-a", priv))
	_, err = alice.Publish(ctx, m)
	require.NoError(t, err)
	d := receive()
	require.Equal(t, pigeon.SignatureV2, d.Signature.V)
	require.NoError(t, pigeon.VerifyMessageWithKeys(d, keys))
	d.CorrelationID = "c-other"
	requireCodeOf(t, pigeon.VerifyMessageWithKeys(d, keys), pigeon.CodeSignatureInvalid)

	// The second form, in one publish_batch.
	var pending []*ws.PendingPublish
	for _, text := range []string{"b1", "b2", "b3"} {
		m := chat(text)
		require.NoError(t, pigeon.SignMessage(m, "sig-a", priv))
		p, err := alice.PublishAsync(ctx, m)
		require.NoError(t, err)
		pending = append(pending, p)
	}
	for _, p := range pending {
		_, err := p.Wait(ctx)
		require.NoError(t, err)
	}
	for range 3 {
		d := receive()
		require.Equal(t, pigeon.SignatureV2, d.Signature.V)
		require.NoError(t, pigeon.VerifyMessageWithKeys(d, keys))
	}

	// The first form still verifies, and arrives as it was signed.
	m = chat("first")
	m.ID, m.Time = "msg_first_form", time.Now().UTC().Format(time.RFC3339Nano)
	m.Signature = &pigeon.Signature{KID: "sig-a", Alg: pigeon.AlgEd25519}
	in, err := pigeon.CanonicalSigningInput(m)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(in, []byte(`["pigeon-sig-v1",`)))
	m.Signature.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, in))
	_, err = alice.Publish(ctx, m)
	require.NoError(t, err)
	d = receive()
	require.Zero(t, d.Signature.V)
	require.NoError(t, pigeon.VerifyMessageWithKeys(d, keys))

	// Another form is refused before any receiver sees it.
	for _, form := range []int{1, 3} {
		m = chat("other")
		require.NoError(t, pigeon.SignMessage(m, "sig-a", priv))
		m.Signature.V = form
		_, err = alice.Publish(ctx, m)
		requireCodeOf(t, err, pigeon.CodeSignatureInvalid)
	}
	select {
	case m := <-got:
		t.Fatalf("delivered %+v", m)
	case <-time.After(50 * time.Millisecond):
	}
}
