package pigeon_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pigeon/internal/wire"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestGroupNames: a consumer group name that could be taken for another
// group's key ('|' separates a group's name from its selector, filter
// and scope; "cursor:" starts a pull cursor's key), or that holds control
// characters, invalid UTF-8 or more than MaxGroupName bytes, is refused
// INVALID_ARGUMENT and starts no subscription; any other name works.
func TestGroupNames(t *testing.T) {
	f := newFixture(t)
	s := f.connect("notifier-token", "notifications.send")
	tests := []struct {
		name  string
		group string
		ok    bool
	}{
		{"plain", "mailers", true},
		{"default spelled out", "default", true},
		{"unicode", "équipe-名前.v2", true},
		{"longest", strings.Repeat("g", pigeon.MaxGroupName), true},
		{"too long", strings.Repeat("g", pigeon.MaxGroupName+1), false},
		{"spells a scoped group's key", "default|/||/room=lobby", false},
		{"bar alone", "|", false},
		{"a pull cursor's key", "cursor:notifier", false},
		{"NUL", "a\x00b", false},
		{"newline", "a\nb", false},
		{"DEL", "a\x7fb", false},
		{"invalid UTF-8", "a\xffb", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := s.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup(tc.group))
			if !tc.ok {
				requireCode(t, err, pigeon.CodeInvalidArgument)
				require.Nil(t, sub)
				return
			}
			require.NoError(t, err)
			require.NoError(t, sub.Unsubscribe(ctx))
		})
	}
}

// TestGroupsPerSubjectAreCapped: a work-queue subject has at most
// Options.MaxGroupsPerSubject consumer groups (each group name, and each
// selector beside one, is a group) in use; a subscription that would
// start one more is refused TOO_MANY_GROUPS (HTTP 429) and audited, while
// the groups in use go on taking subscribers, pulls still work, and
// another subject has its own count.
func TestGroupsPerSubjectAreCapped(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.MaxGroupsPerSubject = 3 })
	s := f.connect("notifier-token", "notifications.send")
	subscribe := func(group string, opts ...pigeon.SubscribeOption) (pigeon.Subscription, error) {
		return s.Subscribe(ctx, "notifications.send", nopHandler, append(opts, pigeon.WithGroup(group))...)
	}
	var held []pigeon.Subscription
	for _, g := range []string{"a", "b", "c"} {
		sub, err := subscribe(g)
		require.NoError(t, err, "group %s", g)
		held = append(held, sub)
	}
	_, err := subscribe("d")
	pe := requireCode(t, err, pigeon.CodeTooManyGroups)
	require.Equal(t, http.StatusTooManyRequests, wire.HTTPStatus(pe.Code))
	_, err = subscribe("b", pigeon.WithSelector("/kind=email"))
	requireCode(t, err, pigeon.CodeTooManyGroups) // a selector makes a group of its own

	// A group in use takes more subscribers; one left idle frees its
	// place for another.
	require.NoError(t, held[0].Unsubscribe(ctx))
	for _, g := range []string{"b", "d"} {
		sub, err := subscribe(g)
		require.NoError(t, err, "group %s", g)
		require.NoError(t, sub.Unsubscribe(ctx))
	}
	_, err = s.Receive(ctx, "notifications.send", 1)
	require.NoError(t, err, "a pull is not refused")

	f.clock.Advance(time.Second) // the run of refusals is written
	require.Equal(t, 2, refusalCount(t, f.e, pigeon.EventSubscribeDenied, pigeon.CodeTooManyGroups), "each refusal is audited")

	f2 := newFixture(t, func(o *pigeon.Options) { o.MaxGroupsPerSubject = 1 })
	crew := f2.connect("notifier-token", "notifications.send")
	_, err = crew.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup("x"))
	require.NoError(t, err)
	_, err = crew.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup("y"))
	requireCode(t, err, pigeon.CodeTooManyGroups)
}

// TestGroupCapDefault: the cap is DefaultMaxGroupsPerSubject when the
// option is zero; a negative option lifts it.
func TestGroupCapDefault(t *testing.T) {
	for _, tc := range []struct {
		limit  int
		refuse bool
	}{{0, true}, {-1, false}} {
		f := newFixture(t, func(o *pigeon.Options) { o.MaxGroupsPerSubject = tc.limit })
		s := f.connect("notifier-token", "notifications.send")
		for i := range pigeon.DefaultMaxGroupsPerSubject {
			// Held, as a subscriber holds its group: a group counts while
			// it is in use.
			release, err := f.e.HoldGroup(ctx, "notifications.send", "g"+strconv.Itoa(i))
			require.NoError(t, err)
			t.Cleanup(release)
		}
		_, err := s.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup("one-more"))
		if tc.refuse {
			requireCode(t, err, pigeon.CodeTooManyGroups)
		} else {
			require.NoError(t, err)
		}
	}
}
