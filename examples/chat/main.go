// Command chat runs two chat programs in a room routed by
// /kind=chat/room=lobby. Their messages are signed and sealed end to end:
// the broker routes on the clear room field, checks each signature against
// the sender's published key and never holds a private key. Midway an
// operator takes a member's role away, and that member's next message is
// denied.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"pigeon"
	"pigeon/seal"
)

const (
	alice = "spiffe://chat/alice"
	bob   = "spiffe://chat/bob"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(1)
	}
}

func catalog() *pigeon.Catalog {
	return &pigeon.Catalog{
		Schemas: map[string][]byte{"chat.v1": []byte(`{"type":"object","required":["kind","room"],"properties":{"kind":{"const":"chat"},"room":{"type":"string"}}}`)},
		Subjects: []pigeon.SubjectPolicy{{
			Name: "chat.messages", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Schema:    &pigeon.SchemaRef{Name: "chat.v1"},
			Data:      pigeon.DataPolicy{Classification: "internal", Encryption: "required", RoutingFields: []string{"kind", "room"}},
			Integrity: pigeon.IntegrityPolicy{Signature: "required"},
			// No catalog rule opens the subject: access comes from roles.
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{},
		}},
	}
}

// member is one chat program: its keys never leave it.
type member struct {
	name  string
	id    string
	keys  *seal.Keys
	sess  pigeon.Session
	token string
}

func run(ctx context.Context, out io.Writer) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	broker, err := pigeon.New(ctx, &pigeon.Options{Catalog: catalog()})
	if err != nil {
		return err
	}
	defer broker.Shutdown(ctx)

	say("operator: define the role lobby-member (publish and receive on /kind=chat/room=lobby)")
	if _, err := broker.PutRole(ctx, pigeon.Role{Name: "lobby-member", Permissions: []pigeon.Permission{
		{Subject: "chat.messages", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}, Selector: "/kind=chat/room=lobby"},
	}}); err != nil {
		return err
	}
	members := map[string]*member{}
	for _, m := range []*member{{name: "alice", id: alice}, {name: "bob", id: bob}} {
		if m.keys, err = seal.GenerateKeys(); err != nil {
			return err
		}
		if _, err := broker.CreateAccount(ctx, pigeon.Account{ID: m.id, Roles: []string{"lobby-member"}}); err != nil {
			return err
		}
		// The member's public keys, published for it by the application.
		keys := []pigeon.PublicKey{
			pigeon.Ed25519PublicKey(m.keys.SigningKID, m.keys.SigningPublic),
			pigeon.X25519PublicKey(m.keys.EncryptionKID, m.keys.EncryptionPublic),
		}
		if _, err := broker.PutAccountKeys(ctx, m.id, keys); err != nil {
			return err
		}
		grant, err := broker.IssueGrant(ctx, m.id, []string{"lobby-member"}, time.Hour)
		if err != nil {
			return err
		}
		m.token = grant.Token
		if m.sess, err = broker.Connect(ctx, m.token, []string{"chat.messages"}); err != nil {
			return err
		}
		members[m.name] = m
		say("operator: %s joins with a grant token (%s…), keys %s / %s", m.name, grant.JTI[:10], m.keys.SigningKID, m.keys.EncryptionKID)
	}

	// Each member reads the room: it verifies the envelope signature with the
	// sender's published keys and opens what was sealed for it.
	received := make(chan string, 16)
	for _, m := range members {
		me := m
		_, err := me.sess.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
			keys, err := broker.AccountKeys(ctx, d.Message.Source)
			if err != nil {
				return err
			}
			if err := pigeon.VerifyMessageWithKeys(d.Message, keys); err != nil {
				return err
			}
			// The sealed part names its keys: skip what was sealed for
			// another member, open the rest with the sender's signing key
			// that it names, valid at the message's time (the sender may
			// have rotated since).
			s, err := seal.ReadSealed(d.Message.Data)
			if err != nil {
				return err
			}
			if s.RecipientKID != me.keys.EncryptionKID {
				return nil // sealed for someone else
			}
			at, err := time.Parse(time.RFC3339Nano, d.Message.Time)
			if err != nil {
				return err
			}
			sigKey, ok := pigeon.SelectKey(keys, s.SenderKID, pigeon.UseSig, at)
			if !ok {
				return fmt.Errorf("%s publishes no signing key %q valid at %s", d.Message.Source, s.SenderKID, d.Message.Time)
			}
			senderPub, err := sigKey.Ed25519()
			if err != nil {
				return err
			}
			clear, payload, err := seal.OpenData(d.Message.Data, me.keys.EncryptionPrivate, senderPub)
			if err != nil {
				return err // tampered: a handler error, never taken for someone else's
			}
			var body struct{ Text string }
			_ = json.Unmarshal(payload, &body)
			received <- fmt.Sprintf("%s got in %s from %s: %q", me.name, clear["room"], d.Message.Source, body.Text)
			return nil
		}, pigeon.WithSelector("/kind=chat/room=lobby"))
		if err != nil {
			return err
		}
	}

	send := func(from, to *member, text string) error {
		keys, err := broker.AccountKeys(ctx, to.id)
		if err != nil {
			return err
		}
		enc, _ := pigeon.SelectKey(keys, "", pigeon.UseEnc, time.Now())
		encPub, err := enc.X25519()
		if err != nil {
			return err
		}
		payload, _ := json.Marshal(map[string]string{"text": text})
		data, err := seal.SealData(map[string]any{"kind": "chat", "room": "lobby"}, payload, enc.KID, encPub, from.keys.SigningKID, from.keys.SigningPrivate)
		if err != nil {
			return err
		}
		m := &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat", Data: data}
		if err := pigeon.SignMessage(m, from.keys.SigningKID, from.keys.SigningPrivate); err != nil {
			return err
		}
		_, err = from.sess.Publish(ctx, m)
		return err
	}
	wait := func() error {
		select {
		case line := <-received:
			say("  %s", line)
			return nil
		case <-time.After(10 * time.Second):
			return fmt.Errorf("a message did not arrive")
		}
	}

	a, b := members["alice"], members["bob"]
	say("alice -> bob, sealed for bob and signed by alice")
	if err := send(a, b, "hi bob, lunch?"); err != nil {
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	say("bob -> alice")
	if err := send(b, a, "sure, noon"); err != nil {
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	say("a clear-text message is refused: the subject requires sealing")
	_, err = a.sess.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
		Data: json.RawMessage(`{"kind":"chat","room":"lobby","text":"in clear"}`)})
	say("  denied: %s", pigeon.ErrorCode(err))
	if pigeon.ErrorCode(err) != pigeon.CodeEncryptionRequired {
		return fmt.Errorf("expected ENCRYPTION_REQUIRED, got %v", err)
	}

	say("operator: remove lobby-member from bob, mid-conversation")
	if _, err := broker.RemoveAccountRole(ctx, bob, "lobby-member"); err != nil {
		return err
	}
	err = send(b, a, "one more thing…")
	say("bob's next message: denied with %s", pigeon.ErrorCode(err))
	if pigeon.ErrorCode(err) != pigeon.CodeGrantRevoked {
		return fmt.Errorf("expected GRANT_REVOKED, got %v", err)
	}
	n, err := broker.VerifyAudit(ctx)
	if err != nil {
		return err
	}
	say("audit: %d records, chain intact", n)
	return nil
}
