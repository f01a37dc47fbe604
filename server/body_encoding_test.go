package server_test

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A body is read as the bytes sent: the server decodes no content coding.
// A body marked with one (Content-Encoding: gzip, deflate, br, or any
// other but identity) is refused 400 BAD_REQUEST before it is read, so a
// proxy or firewall that reads the body as the header says (a gzip stream
// it cannot decode, and lets through) never judges other bytes than the
// broker acts on; and a compressed body is never inflated, so it cannot be
// a decompression bomb.
func TestBodiesWithAContentCodingAreRefused(t *testing.T) {
	f := newFixture(t)
	plain := `{"subjects":["payments.authorize"]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte(plain))
	require.NoError(t, err)
	require.NoError(t, zw.Close())

	cases := []struct {
		name, body, encoding string
		status               int
	}{
		{"plain JSON marked gzip", plain, "gzip", http.StatusBadRequest},
		{"gzip marked gzip", gz.String(), "gzip", http.StatusBadRequest},
		{"plain JSON marked deflate", plain, "deflate", http.StatusBadRequest},
		{"plain JSON marked br", plain, "br", http.StatusBadRequest},
		{"plain JSON marked gzip then identity", plain, "gzip, identity", http.StatusBadRequest},
		{"plain JSON marked identity", plain, "identity", http.StatusCreated},
		{"plain JSON marked IDENTITY", plain, "IDENTITY", http.StatusCreated},
		{"plain JSON unmarked", plain, "", http.StatusCreated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var headers []string
			if c.encoding != "" {
				headers = []string{"Content-Encoding", c.encoding}
			}
			r := f.do(t, http.MethodPost, "/v1/contracts", "checkout-token", c.body, headers...)
			require.Equal(t, c.status, r.status, "%s", r.body)
			if c.status == http.StatusBadRequest {
				require.Equal(t, pigeon.CodeBadRequest, r.code(t))
				require.Contains(t, r.message(t), "Content-Encoding")
			}
		})
	}

	t.Run("publish path", func(t *testing.T) {
		id := f.contract(t, "checkout-token", "payments.authorize")
		r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", `{"subject":"payments.authorize"}`,
			"Content-Encoding", "gzip", "x-pigeon-contract", id)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Equal(t, pigeon.CodeBadRequest, r.code(t))
		require.Contains(t, r.message(t), "Content-Encoding")
	})
	t.Run("a body sent twice marked is refused once", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, f.hs.URL+"/v1/contracts", strings.NewReader(plain))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer checkout-token")
		req.Header.Add("Content-Encoding", "identity")
		req.Header.Add("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
}
