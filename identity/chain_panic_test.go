package identity_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// panicMethod is a method with a bug: every credential makes it panic.
type panicMethod struct{ calls atomic.Int64 }

func (m *panicMethod) AuthenticateCredential(context.Context, pigeon.Credential) (*pigeon.Principal, error) {
	m.calls.Add(1)
	panic("the method choked on this credential")
}

// TestChainCountsAPanickingMethodAsARefusal: a method that panics on a
// credential the client chose refused it, as the engine answers
// (UNAUTHENTICATED); the panic unwound past the chain's count, and a
// Limiter (deprecated, but still honoured) never saw the refusal: a
// source could make the method panic, and guess, for ever. The panic is
// now counted as the method's refusal and passed on, untouched, to the
// engine, which recovers it; the source is then refused RATE_LIMITED
// before any method runs, as after any other run of refusals.
func TestChainCountsAPanickingMethodAsARefusal(t *testing.T) {
	const remote = "192.0.2.7:4000"
	l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 2})
	m := &panicMethod{}
	c := identity.NewChain(&identity.ChainOptions{Limiter: l}, identity.Method{Name: pigeon.AuthToken, Auth: m})
	cred := pigeon.Credential{Bearer: "a-token", RemoteAddr: remote}

	for range 2 {
		require.PanicsWithValue(t, "the method choked on this credential", func() {
			_, _ = c.AuthenticateCredential(context.Background(), cred)
		}, "the panic is passed on, for the engine to recover")
	}
	require.Equal(t, int64(2), l.Stats().Failures, "each panic is counted as a refusal")
	require.False(t, l.Allow(remote))

	_, err := c.AuthenticateCredential(context.Background(), cred)
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err))
	require.Equal(t, int64(2), m.calls.Load(), "the source is refused before any method runs")
	require.True(t, l.Allow("192.0.2.8:4000"), "another source is not")
}

// TestChainPanicBehindTheEngine: behind the engine, a chain whose method
// panics refuses the credential as unknown (the engine recovers it), and
// counts the refusal with its Limiter.
func TestChainPanicBehindTheEngine(t *testing.T) {
	const remote = "192.0.2.9:4000"
	l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 1})
	c := identity.NewChain(&identity.ChainOptions{Limiter: l}, identity.Method{Name: pigeon.AuthToken, Auth: &panicMethod{}})
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: c})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	_, err = e.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: "a-token", RemoteAddr: remote})
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
	_, err = e.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: "a-token", RemoteAddr: remote})
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err), "the chain's Limiter counted the first")
}
