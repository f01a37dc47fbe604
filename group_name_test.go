package pigeon_test

import (
	"strings"
	"testing"

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
