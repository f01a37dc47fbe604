package programs

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// The lineage keyed each message it remembers by its subject and id as
// the message held them: substrings of the one allocation that holds all
// of an envelope's text fields (the decoder's), up to 256 bytes each and
// 512 for reason. Each of the Options.LineageSize entries kept that whole
// text alive, up to some 4 KiB, not the few dozen bytes of its key: a
// program filling its messages' fields made the lineage hold about
// 290 MB at the default size. The key is now a copy of its own.
func TestLineageKeyDoesNotPinTheMessagesText(t *testing.T) {
	text := strings.Repeat("r", 4096) + "orders.in" + "msg-1"
	m := &pigeon.Message{Reason: text[:4096], Subject: text[4096:4105], ID: text[4105:]}
	l := newLineage(&Options{MaxHops: DefaultMaxHops, MaxDescendants: -1, LineageSize: 4})
	l.published(hop{root: &tree{}}, m)
	within := func(s string) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(text)))
		return p >= lo && p < lo+uintptr(len(text))
	}
	require.Len(t, l.msgs.m, 1)
	for k := range l.msgs.m {
		require.False(t, within(k.subject), "the subject keeps the message's text alive")
		require.False(t, within(k.id), "the id keeps the message's text alive")
	}
	require.Equal(t, 1, l.of(m).depth, "the message is found by its copy")
}
