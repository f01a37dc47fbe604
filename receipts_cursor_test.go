package pigeon_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

func TestParseReceiptCursor(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pigeon.ReceiptCursor
		ok   bool
	}{
		{"", pigeon.ReceiptCursor{}, true},
		{"0:0", pigeon.ReceiptCursor{}, true},
		{"41:7", pigeon.ReceiptCursor{AuditSeq: 41, Seq: 7}, true},
		{"007:01", pigeon.ReceiptCursor{AuditSeq: 7, Seq: 1}, true},
		{"41", pigeon.ReceiptCursor{AuditSeq: 41, Seq: ^uint64(0)}, true},
		{"18446744073709551615:18446744073709551615", pigeon.ReceiptCursor{AuditSeq: ^uint64(0), Seq: ^uint64(0)}, true},
		{"18446744073709551616", pigeon.ReceiptCursor{}, false},
		{"1:18446744073709551616", pigeon.ReceiptCursor{}, false},
		{"+1", pigeon.ReceiptCursor{}, false},
		{"-1", pigeon.ReceiptCursor{}, false},
		{" 1", pigeon.ReceiptCursor{}, false},
		{"1:", pigeon.ReceiptCursor{}, false},
		{":1", pigeon.ReceiptCursor{}, false},
		{":", pigeon.ReceiptCursor{}, false},
		{"1:2:3", pigeon.ReceiptCursor{}, false},
		{"0x10", pigeon.ReceiptCursor{}, false},
		{"1_000", pigeon.ReceiptCursor{}, false},
		{"١", pigeon.ReceiptCursor{}, false}, // a digit of another script
	} {
		got, err := pigeon.ParseReceiptCursor(tc.in)
		if !tc.ok {
			require.Error(t, err, "%q", tc.in)
			require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err))
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.Equal(t, got, must(pigeon.ParseReceiptCursor(got.String())), "%q", tc.in)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var (
	cursorText = regexp.MustCompile(`^[0-9]+(:[0-9]+)?$`)
	digits     = regexp.MustCompile(`[0-9]+`)
)

// FuzzParseReceiptCursor: ParseReceiptCursor takes decimal cursors alone,
// each number within 64 bits, and what String writes reads back as the
// same cursor.
func FuzzParseReceiptCursor(f *testing.F) {
	for _, s := range []string{"", "1", "41:7", "1:", "-1", "18446744073709551616:0", "007:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fits := true
		for _, n := range digits.FindAllString(s, -1) {
			if _, err := strconv.ParseUint(n, 10, 64); err != nil {
				fits = false
			}
		}
		c, err := pigeon.ParseReceiptCursor(s)
		if err != nil {
			require.False(t, s == "" || cursorText.MatchString(s) && fits, "%q refused: %v", s, err)
			return
		}
		require.True(t, s == "" || cursorText.MatchString(s), "%q taken", s)
		back, err := pigeon.ParseReceiptCursor(c.String())
		require.NoError(t, err)
		require.Equal(t, c, back)
	})
}
