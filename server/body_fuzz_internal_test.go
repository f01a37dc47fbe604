package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// FuzzDecodeBody: any body, read as the request bodies of the API are
// (CheckJSON on the trimmed text, then decodeBody into the request's
// type), is decoded or refused with a typed client error (400-class
// code), never a panic; a body accepted is one JSON object with no two
// members of one name and no member naming a field of the request in
// another case (which encoding/json would take for the field).
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"messageId":"m","delayMs":5}`,
		`{"messageId":"m","messageId":"n"}`,
		`{"messageid":"m"}`,
		`{"subject":"s","reason":"r","fromSequence":1,"max":10}`,
		`{"message":{"type":"t"},"timeoutMs":100}`,
		`{"delayMs":1e400}`,
		`{"delayMs":-9223372036854775809}`,
		"{\"a\":\"\xff\"}",
		`[1]`, ``, `  `, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b := bytes.TrimSpace(raw)
		if len(b) > 0 {
			if err := pigeon.CheckJSON(b); err != nil {
				requireClientError(t, err)
				return
			}
		}
		targets := []struct {
			v      any
			fields []string
		}{
			{&settleBody{}, []string{"messageId", "delayMs", "contractId"}},
			{&pigeon.ReplayRequest{}, []string{"subject", "reason", "fromSequence", "toSequence", "max"}},
			{&struct {
				Message   json.RawMessage `json:"message"`
				TimeoutMs int64           `json:"timeoutMs"`
			}{}, []string{"message", "timeoutMs"}},
		}
		for _, tg := range targets {
			err := decodeBody(b, tg.v, true)
			if err != nil {
				requireClientError(t, err)
				continue
			}
			names := topNames(t, b)
			seen := map[string]bool{}
			for _, n := range names {
				require.False(t, seen[n], "two members named %q", n)
				seen[n] = true
				for _, f := range tg.fields {
					require.False(t, n != f && strings.EqualFold(n, f), "member %q names field %q in another case", n, f)
				}
			}
		}
	})
}

// topNames lists the member names of the JSON object b, in order.
func topNames(t *testing.T, b []byte) []string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	tok, err := d.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok, "an accepted body is one JSON object")
	var names []string
	for d.More() {
		tok, err := d.Token()
		require.NoError(t, err)
		names = append(names, tok.(string))
		var skip json.RawMessage
		require.NoError(t, d.Decode(&skip))
	}
	return names
}

func requireClientError(t *testing.T, err error) {
	t.Helper()
	code := pigeon.ErrorCode(err)
	require.NotEmpty(t, code, "%v", err)
	switch code {
	case pigeon.CodeBadRequest, pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8, pigeon.CodeEnvelopeInvalid:
	default:
		t.Fatalf("%s is not a client error: %v", code, err)
	}
}
