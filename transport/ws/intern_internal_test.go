package ws

import (
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestInterner: a string seen again comes back as the same string (no
// allocation), whatever shares its cache slot; every string comes back
// right, past the map's bound and beyond the interned length too.
func TestInterner(t *testing.T) {
	var in interner
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	first := in.str([]byte("payments.events"))
	require.Equal(t, "payments.events", first)
	require.True(t, same(first, in.str([]byte("payments.events"))))

	// Strings of one slot (same length and end bytes) take turns in it.
	a, b := []byte("axxxa"), []byte("ayyya")
	require.Equal(t, internSlot(a), internSlot(b))
	sa, sb := in.str(a), in.str(b)
	for range 3 {
		require.True(t, same(sa, in.str(a)))
		require.True(t, same(sb, in.str(b)))
	}

	for i := range 2 * internMax {
		k := []byte("id-" + strconv.Itoa(i))
		require.Equal(t, string(k), in.str(k))
		require.Equal(t, string(k), in.str(k))
	}
	require.LessOrEqual(t, len(in.m), internMax)
	require.True(t, same(first, in.str([]byte("payments.events"))), "kept once interned")
	// A member's last value comes back from its own slot.
	for range 3 {
		require.True(t, same(first, in.field(mSubject, []byte("payments.events"))))
	}
	sub := in.field(mSubject, []byte("payments.other"))
	require.Equal(t, "payments.other", sub)
	require.True(t, same(sub, in.field(mSubject, []byte("payments.other"))))
	require.True(t, same(first, in.field(mSubject, []byte("payments.events"))))
	require.Equal(t, "", in.field(mType, nil))

	long := make([]byte, internLen+1)
	require.Equal(t, string(long), in.str(long))
	require.Equal(t, "", in.str(nil))
}

// TestInternedLastValue: a connection's reader that takes a member's
// value as the one it had last, without scanning it, decodes every frame
// as a reader that saw no frame before it: the same value again, one the
// last value begins or ends with, an escaped spelling of it, a text
// whose bytes follow the last value with no closing quote.
func TestInternedLastValue(t *testing.T) {
	frame := func(subject string) []byte {
		return []byte(`{"op":"publish","id":"p1","message":{"type":"t","subject":` + subject + `,"intent":"i","data":{}}}`)
	}
	var in interner
	for _, subject := range []string{
		`"payments.events"`, `"payments.events"`, `"payments.events2"`, `"payments.event"`, `"payments.events"`,
		`"payments\u002eevents"`, `"payments.events\"x"`, `"payments.events`, `"payments.events"`, `""`, `"payments.events"`,
		`"payments.events" `, `"a"`, `"payments.eventsa"`,
	} {
		b := frame(subject)
		for _, decode := range []func([]byte, *interner) (*Frame, error){decodeFrame, decodeServerFrame, decodeClientFrame} {
			want, wantErr := decode(b, nil)
			got, err := decode(b, &in)
			require.Equal(t, wantErr, err, "%s", b)
			if wantErr == nil {
				require.Equal(t, want.Message.Subject, got.Message.Subject, "%s", b)
				require.Equal(t, want.Message, got.Message, "%s", b)
			}
		}
	}
}
