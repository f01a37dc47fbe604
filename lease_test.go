package pigeon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetryDelay pins the one backoff schedule: fixed, linear or
// exponential from one second, capped at the subject's maximum delay, then
// scaled by Options.RetryBase; a RetryAfter delay wins.
func TestRetryDelay(t *testing.T) {
	e := &Engine{opts: Options{RetryBase: 10 * time.Millisecond}}
	ms := time.Millisecond
	for _, tc := range []struct {
		backoff string
		n       int
		want    time.Duration
	}{
		{"fixed", 1, 10 * ms},
		{"fixed", 7, 10 * ms},
		{"linear", 1, 10 * ms},
		{"linear", 3, 30 * ms},
		{"exponential", 1, 10 * ms},
		{"exponential", 4, 80 * ms},
		{"", 3, 40 * ms},
		{"exponential", 10, 300 * ms}, // 512 s capped at 30 s, scaled
		{"exponential", 99, 300 * ms},
		{"linear", 45, 300 * ms},
		// An attempt below 1, which no lease has, waits as the first: a
		// shift by a negative count panicked.
		{"exponential", 0, 10 * ms},
		{"", -3, 10 * ms},
	} {
		s := &subject{backoff: tc.backoff, maxDelay: 30 * time.Second}
		require.Equal(t, tc.want, e.retryDelay(s, tc.n, nil), "%s attempt %d", tc.backoff, tc.n)
		require.Equal(t, tc.want, e.retryDelay(s, tc.n, errors.New("handler failed")), "%s attempt %d", tc.backoff, tc.n)
	}
	s := &subject{backoff: "fixed", maxDelay: 30 * time.Second}
	require.Equal(t, 5*time.Second, e.retryDelay(s, 1, RetryAfter(5*time.Second, nil)))
	require.Equal(t, time.Duration(0), e.retryDelay(s, 1, RetryAfter(0, nil)))
	require.Equal(t, MaxRetryDelay, e.retryDelay(s, 1, RetryAfter(1000*time.Hour, nil)), "a RetryAfter waits MaxRetryDelay at most")
	require.Equal(t, 10*ms, e.retryDelay(s, 1, RetryAfter(-1, nil)), "a negative RetryAfter falls back to the backoff")
}

// TestConsumerGroup pins the group names, which are store keys.
func TestConsumerGroup(t *testing.T) {
	sel := func(s string) Selector {
		x, err := ParseSelector(s)
		require.NoError(t, err)
		return x
	}
	scoped := &permit{}
	scoped.setScope(OpReceive, sel("/region=eu"))
	scoped.setScope(OpReceive, sel("/region=us"))
	all := sel("/")
	for _, tc := range []struct {
		scope *permit
		o     *SubscribeOptions
		sel   Selector
		want  string
	}{
		{nil, nil, Selector{}, "default"},
		{&permit{}, nil, Selector{}, "default"},
		{scoped, nil, Selector{}, "default|scope:/region=eu,/region=us"},
		{nil, &SubscribeOptions{}, all, "default"},
		{nil, &SubscribeOptions{Group: "billing"}, all, "billing"},
		{nil, &SubscribeOptions{Selector: "/"}, all, "default|/||"},
		{nil, &SubscribeOptions{Group: "g", Selector: "/kind=chat"}, sel("/kind=chat"), "g|/kind=chat||"},
		{nil, &SubscribeOptions{Filter: "true"}, all, "default|/|true|"},
		{scoped, &SubscribeOptions{}, all, "default|/||/region=eu,/region=us"},
		// Parts holding '|' are length-prefixed: /k=v|true with filter
		// true and /k=v with filter true||true were one key.
		{nil, &SubscribeOptions{Selector: "/k=v|true", Filter: "true"}, sel("/k=v|true"), "default||9:/k=v|true4:true0:"},
		{nil, &SubscribeOptions{Selector: "/k=v", Filter: "true||true"}, sel("/k=v"), "default||4:/k=v10:true||true0:"},
	} {
		require.Equal(t, tc.want, consumerGroup(tc.scope, tc.o, tc.sel, nil))
	}

	// A filter that reads the principal keys a group per principal (its
	// id, roles and attributes); other filters do not look at who.
	all = Selector{}
	byOwner := &SubscribeOptions{Group: "g", Filter: "message.data.owner == principal.id"}
	alice := &Principal{ID: "alice", Roles: []string{"b", "a"}, Attributes: map[string]string{"team": "x"}}
	aliceAgain := &Principal{ID: "alice", Roles: []string{"a", "b"}, Attributes: map[string]string{"team": "x"}}
	bob := &Principal{ID: "bob"}
	ka, kb := consumerGroup(nil, byOwner, all, alice), consumerGroup(nil, byOwner, all, bob)
	require.NotEqual(t, ka, kb)
	require.Equal(t, ka, consumerGroup(nil, byOwner, all, aliceAgain), "roles in another order")
	require.NotEqual(t, ka, consumerGroup(nil, byOwner, all, &Principal{ID: "alice", Roles: []string{"a", "b"}, Attributes: map[string]string{"team": "y"}}))
	require.True(t, strings.HasPrefix(ka, "g|/|message.data.owner == principal.id||principal:"), ka)
	plain := &SubscribeOptions{Group: "g", Filter: "message.data.n > 1"}
	require.Equal(t, consumerGroup(nil, plain, all, alice), consumerGroup(nil, plain, all, bob))
	require.Equal(t, "g|/|message.data.n > 1|", consumerGroup(nil, plain, all, alice))
	piped := &SubscribeOptions{Group: "g", Filter: "principal.id == 'a' || true"}
	require.True(t, strings.HasPrefix(consumerGroup(nil, piped, all, alice), "g||1:/27:principal.id == 'a' || true0:42:principal:"))
}
