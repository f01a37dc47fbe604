package pigeon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
)

// authFailures returns the auth.failed records of e's audit log, and how
// many refusals they stand for.
func authFailures(t *testing.T, e *pigeon.Engine) (out []pigeon.AuditRecord, refusals int) {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 100000)
	require.NoError(t, err)
	for _, r := range recs {
		if r.Type != string(pigeon.EventAuthFailed) {
			continue
		}
		out = append(out, r)
		refusals++
		if rest, ok := strings.CutPrefix(r.Ref, "coalesced:"); ok {
			n, _, _ := strings.Cut(rest, " ")
			k, err := strconv.Atoi(n)
			require.NoError(t, err, r.Ref)
			refusals += k - 1
		}
	}
	return out, refusals
}

// requireNoSecret fails when secret appears anywhere in e's audit log.
func requireNoSecret(t *testing.T, e *pigeon.Engine, secret string) {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 100000)
	require.NoError(t, err)
	b, err := json.Marshal(recs)
	require.NoError(t, err)
	require.NotContains(t, string(b), secret, "the audit log holds a credential")
}

// TestAuthFailuresAreAudited: every refused credential writes an
// auth.failed record naming the method tried and the source IP, never the
// credential, not even part of it; a success writes none.
func TestAuthFailuresAreAudited(t *testing.T) {
	const guess = "guess-Zq7-not-a-token"
	const jwt = "eyJhbGciOiJFZERTQSJ9.eyJpc3MiOiJzb21lb25lIn0.Zq7c2ln"
	for _, tc := range []struct {
		name string
		cred pigeon.Credential
		ref  string
	}{
		{"bearer over IPv4", pigeon.Credential{Bearer: guess, RemoteAddr: "192.0.2.7:5555"}, "auth:token from 192.0.2.7"},
		{"grant-shaped JWT", pigeon.Credential{Bearer: jwt, RemoteAddr: "192.0.2.7:5556"}, "auth:jwt from 192.0.2.7"},
		{"nothing sent", pigeon.Credential{RemoteAddr: "[2001:db8::1]:443"}, "auth:none from 2001:db8::/64"},
		{"IPv6 with a zone", pigeon.Credential{Bearer: guess, RemoteAddr: "[2001:db8:1:2::5%eth0]:443"}, "auth:token from 2001:db8:1:2::/64"},
		{"IPv4-mapped IPv6", pigeon.Credential{Bearer: guess, RemoteAddr: "[::ffff:192.0.2.8]:1"}, "auth:token from 192.0.2.8"},
		{"in process", pigeon.Credential{Bearer: guess}, "auth:token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.e.AuthenticateCredential(ctx, tc.cred)
			requireCode(t, err, pigeon.CodeUnauthenticated)
			_, err = f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "orders-token", RemoteAddr: tc.cred.RemoteAddr})
			require.NoError(t, err)
			recs, n := authFailures(t, f.e)
			require.Equal(t, 1, n)
			require.Equal(t, string(pigeon.OutcomeDeny), recs[0].Outcome)
			require.Equal(t, string(pigeon.CodeUnauthenticated), recs[0].Code)
			require.Equal(t, tc.ref, recs[0].Ref)
			require.Empty(t, recs[0].Principal)
			requireNoSecret(t, f.e, "Zq7")
			requireNoSecret(t, f.e, "orders-token")
		})
	}
}

// TestAuthFailuresCoalesce: a flood of guesses from one source is its
// first refusal in full and one coalesced:N record a second (carrying the
// method and source), so the log does not grow with the guesses; another
// source's guesses are a run of their own.
func TestAuthFailuresCoalesce(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit = -1 })
	for i := range 200 {
		_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess-" + strconv.Itoa(i), RemoteAddr: "198.51.100.4:" + strconv.Itoa(1000+i)})
		requireCode(t, err, pigeon.CodeUnauthenticated)
		if i == 99 {
			f.clock.Advance(1100 * time.Millisecond)
		}
	}
	_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess-x", RemoteAddr: "198.51.100.5:1"})
	requireCode(t, err, pigeon.CodeUnauthenticated)
	f.clock.Advance(1100 * time.Millisecond)
	recs, n := authFailures(t, f.e)
	require.Equal(t, 201, n, "every refusal is accounted for")
	require.Len(t, recs, 5, "two seconds of one source (first + coalesced each) and one of another")
	refs := make([]string, len(recs))
	for i, r := range recs {
		refs[i] = r.Ref
	}
	require.ElementsMatch(t, []string{
		"auth:token from 198.51.100.4", "coalesced:99 auth:token from 198.51.100.4",
		"auth:token from 198.51.100.4", "coalesced:99 auth:token from 198.51.100.4",
		"auth:token from 198.51.100.5",
	}, refs)
	requireNoSecret(t, f.e, "guess-")
}

// TestAuthLockout: a source that had AuthFailureLimit credentials refused
// within the window is refused RATE_LIMITED, with retryAfterMs, before
// its credential is looked at, so a valid token from it fails too; a
// success from it did not reset its count; another source authenticates
// as usual, and the locked one again once the window has passed. Each
// lockout refusal is audited (coalesced).
func TestAuthLockout(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit, o.AuthFailureWindow = 5, time.Minute })
	attacker := "203.0.113.9:4000"
	try := func(tok, addr string) error {
		_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: tok, RemoteAddr: addr})
		return err
	}
	for i := range 4 {
		requireCode(t, try("guess-"+strconv.Itoa(i), attacker), pigeon.CodeUnauthenticated)
		require.NoError(t, try("orders-token", attacker), "below the limit a valid token works; it resets nothing")
	}
	f.clock.Advance(10 * time.Second)
	requireCode(t, try("guess-4", attacker), pigeon.CodeUnauthenticated)
	for range 3 {
		pe := requireCode(t, try("orders-token", "203.0.113.9:4001"), pigeon.CodeRateLimited)
		require.Equal(t, time.Minute.Milliseconds(), pe.Details["retryAfterMs"])
	}
	require.NoError(t, try("orders-token", "203.0.113.10:4000"), "another source is unaffected")
	require.NoError(t, try("orders-token", ""), "in process is never locked out")
	f.clock.Advance(59 * time.Second)
	pe := requireCode(t, try("orders-token", attacker), pigeon.CodeRateLimited)
	require.Equal(t, time.Second.Milliseconds(), pe.Details["retryAfterMs"])
	f.clock.Advance(time.Second)
	require.NoError(t, try("orders-token", attacker), "after the window the source authenticates again")
	requireCode(t, try("guess-5", attacker), pigeon.CodeUnauthenticated)
	require.NoError(t, try("orders-token", attacker), "the count started again")

	recs, _ := authFailures(t, f.e)
	var limited []string
	for _, r := range recs {
		if r.Code == string(pigeon.CodeRateLimited) {
			limited = append(limited, r.Ref)
		}
	}
	require.Equal(t, []string{"auth:token from 203.0.113.9", "coalesced:2 auth:token from 203.0.113.9", "auth:token from 203.0.113.9"}, limited)
	requireNoSecret(t, f.e, "orders-token")
}

// TestLockedOut: Engine.LockedOut answers what AuthenticateCredential
// would, without counting or auditing: no source before the limit, the
// locked source (any address of it) and how long it has left once
// reached, never another source or the zero one, and nothing once the
// window has passed. Asking it a thousand times writes no record and
// extends nothing.
func TestLockedOut(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit, o.AuthFailureWindow = 3, time.Minute })
	attacker := pigeon.SourceOf("203.0.113.9")
	for i := range 3 {
		_, locked := f.e.LockedOut(attacker)
		require.False(t, locked, "below the limit")
		_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess-" + strconv.Itoa(i), RemoteAddr: "203.0.113.9:4000"})
		requireCode(t, err, pigeon.CodeUnauthenticated)
	}
	_, before := authFailures(t, f.e)
	for range 1000 {
		left, locked := f.e.LockedOut(pigeon.SourceOf("203.0.113.9:4001"))
		require.True(t, locked)
		require.Equal(t, time.Minute, left)
	}
	_, after := authFailures(t, f.e)
	require.Equal(t, before, after, "asking writes nothing")
	_, locked := f.e.LockedOut(pigeon.SourceOf("203.0.113.10"))
	require.False(t, locked, "another source")
	_, locked = f.e.LockedOut(pigeon.Source{})
	require.False(t, locked, "the zero source (in process)")
	f.clock.Advance(59 * time.Second)
	left, locked := f.e.LockedOut(attacker)
	require.True(t, locked)
	require.Equal(t, time.Second, left)
	f.clock.Advance(time.Second)
	_, locked = f.e.LockedOut(attacker)
	require.False(t, locked, "the window has passed")
	_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "orders-token", RemoteAddr: "203.0.113.9:4000"})
	require.NoError(t, err, "and AuthenticateCredential agrees")

	off := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit = -1 })
	for i := range 5 {
		_, _ = off.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess-" + strconv.Itoa(i), RemoteAddr: "203.0.113.9:4000"})
	}
	_, locked = off.e.LockedOut(attacker)
	require.False(t, locked, "no lockout when it is off")
}

// TestAuthLockoutIPv6By64: a guesser rotating through the addresses of its
// IPv6 /64, a fresh one for every guess, is one source: locked out at the
// limit, from every address of the /64, and its run is coalesced under
// the prefix, which the records name. The next /64 is another source.
func TestAuthLockoutIPv6By64(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit, o.AuthFailureWindow = 5, time.Minute })
	try := func(tok, addr string) error {
		_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: tok, RemoteAddr: addr})
		return err
	}
	for i := range 5 {
		requireCode(t, try("guess-"+strconv.Itoa(i), "[2001:db8:1:2::"+strconv.FormatInt(int64(i+1), 16)+"]:4000"), pigeon.CodeUnauthenticated)
	}
	pe := requireCode(t, try("orders-token", "[2001:db8:1:2:ffff::1]:4000"), pigeon.CodeRateLimited)
	require.Equal(t, time.Minute.Milliseconds(), pe.Details["retryAfterMs"])
	require.NoError(t, try("orders-token", "[2001:db8:1:3::1]:4000"), "another /64 is another source")
	f.clock.Advance(1100 * time.Millisecond)

	recs, n := authFailures(t, f.e)
	require.Equal(t, 6, n)
	refs := make([]string, len(recs))
	for i, r := range recs {
		refs[i] = r.Code + " " + r.Ref
	}
	require.ElementsMatch(t, []string{"UNAUTHENTICATED auth:token from 2001:db8:1:2::/64", "UNAUTHENTICATED coalesced:4 auth:token from 2001:db8:1:2::/64",
		"RATE_LIMITED auth:token from 2001:db8:1:2::/64"}, refs, "one run of one source, and its lockout")
}

// TestAuthRefusalsAtShutdown: a credential refused because the engine
// is shutting down writes nothing and counts nothing.
func TestAuthRefusalsAtShutdown(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st})
	require.NoError(t, err)
	require.NoError(t, e.Shutdown(ctx))
	_, err = e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess", RemoteAddr: "192.0.2.1:1"})
	requireCode(t, err, pigeon.CodeShutdown)
	recs, err := st.ReadAudit(ctx, 0, 1000)
	require.NoError(t, err)
	for _, r := range recs {
		require.NotEqual(t, string(pigeon.EventAuthFailed), r.Type)
	}
}

// TestReauthenticate: Engine.Reauthenticate answers what authentication
// would answer now (the roles of now, a revoked grant refused) without
// counting or auditing a refusal: ending a stream whose grant was revoked
// is no attempt, and however many times it is asked, the source is not
// locked out and no auth.failed record is written.
func TestReauthenticate(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit, o.AuthFailureWindow = 3, time.Minute })
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)
	cred := pigeon.Credential{Bearer: g.Token, RemoteAddr: "203.0.113.20:5000"}
	p, err := e.AuthenticateCredential(ctx, cred)
	require.NoError(t, err)
	require.True(t, p.HasRole("member"))

	_, err = e.RemoveAccountRole(ctx, carol, "member")
	require.NoError(t, err)
	p, err = e.Reauthenticate(ctx, cred)
	require.NoError(t, err)
	require.False(t, p.HasRole("member"), "the roles of now")

	require.NoError(t, e.RevokeGrant(ctx, g.JTI))
	for range 10 {
		_, err = e.Reauthenticate(ctx, cred)
		requireCode(t, err, pigeon.CodeUnauthenticated)
	}
	_, locked := e.LockedOut(pigeon.SourceOf(cred.RemoteAddr))
	require.False(t, locked, "refusals of Reauthenticate are not counted")
	recs, _ := authFailures(t, f.e)
	require.Empty(t, recs, "nor audited as auth.failed")
	_, err = e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "orders-token", RemoteAddr: cred.RemoteAddr})
	require.NoError(t, err)
}
