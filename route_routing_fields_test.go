package pigeon

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// routingPolicy is a subject whose data must be sealed end to end exactly
// when routing fields are declared (an empty list included).
func routingPolicy(routing []string) SubjectPolicy {
	const who = "spiffe://test/routing"
	return SubjectPolicy{
		Name: "sealed.chat", Version: "v1", Intents: []string{"chat"},
		Data: DataPolicy{Encryption: "required", RoutingFields: routing},
		Policy: map[Operation][]RuleSpec{
			OpPublish: {{Effect: "allow", Principals: []string{who}}},
			OpReceive: {{Effect: "allow", Principals: []string{who}}},
		},
	}
}

// TestRouteE2EEmptyRoutingFieldsDigest: "routingFields: []" with
// encryption required turns end-to-end enforcement on, and omitting it
// leaves it off, but the policy's JSON (omitempty) is the same for both.
// The digest must still differ: the catalog skips a reload whose digest
// is unchanged, and a contract stays valid across one.
func TestRouteE2EEmptyRoutingFieldsDigest(t *testing.T) {
	off, err := compileSubject(routingPolicy(nil), nil)
	require.NoError(t, err)
	on, err := compileSubject(routingPolicy([]string{}), nil)
	require.NoError(t, err)
	require.False(t, off.e2e)
	require.True(t, on.e2e)
	require.NotEqual(t, off.digest, on.digest, "end-to-end on and off share a digest")

	// The digests of policies that were not ambiguous do not move.
	listed, err := compileSubject(routingPolicy([]string{"room"}), nil)
	require.NoError(t, err)
	require.True(t, listed.e2e)
	require.NotEqual(t, listed.digest, on.digest)
}

// TestRouteE2EEmptyRoutingFieldsReload: turning end-to-end encryption on with
// an empty routingFields list, by reloading the subject, is enforced: a
// clear payload is refused from then on.
func TestRouteE2EEmptyRoutingFieldsReload(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, &Options{
		Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: "spiffe://test/routing"}),
		Catalog:       &Catalog{Subjects: []SubjectPolicy{routingPolicy(nil)}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	clear := func() *Message {
		return &Message{Type: "t", Subject: "sealed.chat", Intent: "chat", Data: json.RawMessage(`{"text":"meet at noon"}`)}
	}
	sess, err := e.Connect(ctx, "t", []string{"sealed.chat"})
	require.NoError(t, err)
	_, err = sess.Publish(ctx, clear())
	require.NoError(t, err, "no end-to-end encryption yet")

	require.NoError(t, e.ReplaceSubject(ctx, routingPolicy([]string{})))
	_, err = sess.Publish(ctx, clear())
	require.Error(t, err, "a clear payload was accepted after end-to-end encryption was turned on")
	require.Contains(t, []Code{CodeContractStale, CodeEncryptionRequired}, ErrorCode(err))

	sess, err = e.Connect(ctx, "t", []string{"sealed.chat"})
	require.NoError(t, err)
	_, err = sess.Publish(ctx, clear())
	require.Equal(t, CodeEncryptionRequired, ErrorCode(err), "%v", err)
}
