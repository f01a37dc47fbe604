package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeclaredBodyLengthReservesOnlyWhatIsSent: a publish body was read
// into a buffer of its declared Content-Length, made before a byte of it
// came. Any principal could send headers declaring MaxBody (1 MiB) and
// then nothing, holding a mebibyte of the server's memory per connection
// for up to ReadTimeout for a hundred bytes of its own (16 GiB on the
// default connection cap). The buffer now grows with what is sent, from
// at most maxBodyPrealloc.
func TestDeclaredBodyLengthReservesOnlyWhatIsSent(t *testing.T) {
	for _, tc := range []struct {
		name           string
		declared, sent int
	}{
		{"nothing sent", DefaultMaxBody, 0},
		{"a few bytes sent", DefaultMaxBody, 100},
		{"a tenth sent", DefaultMaxBody, DefaultMaxBody / 10},
		{"a small body, whole", 300, 300},
		{"a large body, whole", DefaultMaxBody, DefaultMaxBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(strings.Repeat("x", tc.sent)))
			r.ContentLength = int64(tc.declared)
			b, err := readBodyInto(nil, httptest.NewRecorder(), r, DefaultMaxBody)
			require.NoError(t, err)
			require.Len(t, b, tc.sent)
			require.LessOrEqual(t, cap(b), 2*(tc.sent+maxBodyPrealloc),
				"the buffer follows what was sent, not what was declared")
		})
	}
}
