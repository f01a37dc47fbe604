package pigeon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/transport/transporttest"
)

// boomPrefix marks the credentials the panicky authenticators below
// panic on; they pass every other one to the demo's tokens.
const boomPrefix = "boom-secret-"

// panickyBearer is an Authenticator of bearer strings that panics on a
// credential starting with boomPrefix, quoting it and a card number, as
// a parser of an application's tokens with a bug might.
type panickyBearer struct{ pigeon.Authenticator }

func (a panickyBearer) Authenticate(ctx context.Context, credential string) (*pigeon.Principal, error) {
	if strings.HasPrefix(credential, boomPrefix) {
		panic("cannot parse token " + credential + " for card 4111 1111 1111 1111")
	}
	return a.Authenticator.Authenticate(ctx, credential)
}

// panickyCredential is a CredentialAuthenticator that panics with an
// error quoting the credential, or with a runtime error (an index out of
// range), on a credential starting with boomPrefix.
type panickyCredential struct {
	pigeon.Authenticator
	runtimeError bool
}

func (a panickyCredential) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	if strings.HasPrefix(c.Bearer, boomPrefix) {
		if a.runtimeError {
			var claims []string
			return &pigeon.Principal{ID: claims[len(c.Bearer)]}, nil
		}
		panic(fmt.Errorf("claims of %s: card 4111111111111111", c.Bearer))
	}
	return a.Authenticate(ctx, c.Bearer)
}

// TestAuthenticatorPanicRefusesTheCredential: an authenticator (the
// application's, or an identity provider's) that panics on a credential
// refuses it, as an unknown credential is refused: UNAUTHENTICATED, with
// the same message, no principal; the refusal is audited (auth.failed)
// and counts toward its source's lockout, and Reauthenticate and Connect
// refuse it too. The panic is logged with its stack, never its value
// (it may quote the credential), and the engine goes on. Before, the
// panic reached the caller: net/http logged it whole, credential
// included, and cut the connection; it was neither audited nor counted.
func TestAuthenticatorPanicRefusesTheCredential(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth func(pigeon.Authenticator) pigeon.Authenticator
	}{
		{"Authenticator", func(a pigeon.Authenticator) pigeon.Authenticator { return panickyBearer{a} }},
		{"CredentialAuthenticator", func(a pigeon.Authenticator) pigeon.Authenticator { return panickyCredential{Authenticator: a} }},
		{"runtime error", func(a pigeon.Authenticator) pigeon.Authenticator {
			return panickyCredential{Authenticator: a, runtimeError: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := contextWithTimeout(30 * time.Second)
			defer cancel()
			logs := &testlog.Buffer{}
			o := transporttest.Options()
			o.Authenticator = tc.auth(o.Authenticator)
			o.Logger = logs.Logger()
			o.AuthFailureLimit = 3
			e, err := pigeon.New(ctx, o)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

			_, unknown := e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "no-such-token"})
			want := requireCode(t, unknown, pigeon.CodeUnauthenticated)

			const from = "203.0.113.7:40000"
			for i := range o.AuthFailureLimit {
				p, err := e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: boomPrefix + itoa(i), RemoteAddr: from})
				require.Nil(t, p, "a panic is no success")
				got := requireCode(t, err, pigeon.CodeUnauthenticated)
				require.Equal(t, want.Message, got.Message, "told no more than an unknown credential is")
				require.Empty(t, got.Details)
			}
			// Counted: the source is locked out, a good token with it.
			_, err = e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "alice-token", RemoteAddr: from})
			requireCode(t, err, pigeon.CodeRateLimited)
			audited := false // a run from one source is coalesced
			for _, r := range auditOf(t, e, pigeon.EventAuthFailed) {
				audited = audited || (r.Code == string(pigeon.CodeUnauthenticated) && strings.Contains(r.Ref, "from 203.0.113.7"))
			}
			require.True(t, audited, "the refusal is audited auth.failed")

			p, err := e.Reauthenticate(ctx, pigeon.Credential{Bearer: boomPrefix + "again", RemoteAddr: "198.51.100.1:1"})
			require.Nil(t, p)
			requireCode(t, err, pigeon.CodeUnauthenticated)
			_, err = e.Connect(ctx, boomPrefix+"connect", []string{"chat.messages"})
			requireCode(t, err, pigeon.CodeUnauthenticated)

			// The engine goes on.
			s, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			_, err = s.Publish(ctx, chatMessage("after"))
			require.NoError(t, err)
			require.NoError(t, s.Close(ctx))

			out := logs.String()
			require.Contains(t, out, "the authenticator panicked")
			require.Contains(t, out, "auth_panic_test.go:", "the stack is logged")
			require.NotContains(t, out, boomPrefix, "the credential is not logged")
			require.NotContains(t, out, "4111")
			if tc.name == "runtime error" {
				require.Contains(t, out, "index out of range", "a runtime error's words are logged")
			}
		})
	}
}
