package ws

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// pulledFrames are messages answers, and frames beside them, as the
// client's reader decodes them (decodeFromServer): the attempts each
// frame decodes to, or the code of its refusal.
var pulledFrames = []struct {
	name, in string
	attempts []int
	code     pigeon.Code
}{
	{"as the broker writes it", `{"op":"messages","re":"r","messages":[],"attempts":[1,2]}`, []int{1, 2}, ""},
	{"none", `{"op":"messages","re":"r","messages":[]}`, nil, ""},
	{"an empty list", `{"op":"messages","re":"r","messages":[],"attempts":[]}`, []int{}, ""},
	{"entries no lease's", `{"op":"messages","re":"r","messages":[],"attempts":[1.5,"2",null,true,{},[3],-1,0,1.0,1e0,1e400,2147483648,9223372036854775808]}`,
		[]int{0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 2147483648, 0}, ""},
	{"an escaped string elsewhere", `{"op":"messages","re":"\u0072","messages":[],"attempts":[1,2.5]}`, []int{1, 0}, ""},
	{"an unknown member", `{"op":"messages","re":"r","note":{},"messages":[],"attempts":[1,2.5]}`, []int{1, 0}, ""},
	{"an escaped name", `{"op":"messages","re":"r","messages":[],"att\u0065mpts":[1,2.5]}`, []int{1, 0}, ""},
	{"white space", " {\"op\" : \"messages\" ,\"re\":\"r\",\"messages\":[] , \"attempts\" : [ 1 , \"x\" ] } ", []int{1, 0}, ""},
	{"null", `{"op":"messages","re":"r","messages":[],"attempts":null}`, nil, pigeon.CodeBadRequest},
	{"an object", `{"op":"messages","re":"r","messages":[],"attempts":{}}`, nil, pigeon.CodeBadRequest},
	{"a number", `{"op":"messages","re":"r","messages":[],"attempts":1}`, nil, pigeon.CodeBadRequest},
	{"null, escaped name", `{"op":"messages","re":"r","messages":[],"att\u0065mpts":null}`, nil, pigeon.CodeBadRequest},
	// Refused whole, as before: text readers could take differently, a
	// name in another case, another member of the wrong type.
	{"two attempts", `{"op":"messages","re":"r","messages":[],"attempts":[1],"att\u0065mpts":[2]}`, nil, pigeon.CodeDuplicateKey},
	{"a name twice in an entry", `{"op":"messages","re":"r","messages":[],"attempts":[{"a":1,"a":2}]}`, nil, pigeon.CodeDuplicateKey},
	{"another case", `{"op":"messages","re":"r","messages":[],"Attempts":[1.5]}`, nil, pigeon.CodeBadRequest},
	{"messages no list", `{"op":"messages","re":"r","messages":{},"attempts":[1.5]}`, nil, pigeon.CodeBadRequest},
	// Frames of other ops decode as decodeClientFrame decodes them.
	{"a deliver", `{"op":"deliver","sub":"s","attempt":1,"message":{"id":"m"},"attempts":[1.5]}`, nil, pigeon.CodeBadRequest},
	{"an ok", `{"op":"ok","re":"r","attempts":null}`, nil, ""},
}

// TestFromServerReadsAttemptsApart: the client's reader reads a messages
// answer's attempts entry by entry, whichever path decodes the rest of
// the frame, and refuses an "attempts" that is no list; it decodes every
// other frame as decodeClientFrame does.
func TestFromServerReadsAttemptsApart(t *testing.T) {
	for _, tc := range pulledFrames {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.in)
			requireFromServerSound(t, b)
			f, err := decodeFromServer(b, &interner{})
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%v", err)
			if tc.code != "" {
				if tc.code == pigeon.CodeBadRequest && f != nil && f.Op == OpMessages {
					require.Equal(t, "r", f.Re, "the call it answers fails with the reason")
				}
				return
			}
			require.Equal(t, tc.attempts, f.Attempts)
		})
	}
}

// FuzzFromServerFrame holds decodeFromServer to decodeClientFrame, a
// messages answer's attempts to encoding/json's reading of each entry,
// and the lists it reads entry by entry (a decisions answer's results
// among them) and a deliver's message to the entries that decode alone
// (requireEntriesSound).
func FuzzFromServerFrame(f *testing.F) {
	for _, tc := range pulledFrames {
		f.Add([]byte(tc.in))
	}
	for _, tc := range pushedFrames {
		f.Add([]byte(tc.in))
	}
	for _, tc := range listFrames {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		requireFromServerSound(t, b)
	})
}

// requireFromServerSound holds the client's reader's decoding of b to
// decodeClientFrame's: the same frame and error, but for a messages
// answer whose "attempts" decodeClientFrame could not take (an entry no
// int holds, or null), or a list frame read entry by entry, or a
// deliver read apart (requireEntriesSound); and a messages answer's attempts, when taken,
// to encoding/json's reading of each entry as an integer (0 when it is
// none).
func requireFromServerSound(t *testing.T, b []byte) {
	t.Helper()
	requireEntriesSound(t, b)
	want, wantErr := decodeClientFrame(b, &interner{})
	got, gotErr := decodeFromServer(b, &interner{})
	pulled := got != nil && got.Op == OpMessages
	switch {
	case wantErr == nil && want.Op == OpMessages && want.Attempts == nil && gotErr != nil:
		require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(gotErr), "a null attempts: %q", b)
		require.Nil(t, got.Attempts)
	case wantErr != nil && gotErr == nil && got != nil && (got.Op == OpDeliver || got.Op == OpDeliverBatch || got.Op == OpDecisions):
		// A push read apart (its attempt and message, or its entries),
		// or a decisions answer's results (requireEntriesSound).
		return
	case wantErr != nil && pulled && pigeon.ErrorCode(gotErr) != pigeon.ErrorCode(wantErr):
		// Read apart: its attempts, or its entries.
		require.Contains(t, []pigeon.Code{"", pigeon.CodeBadRequest}, pigeon.ErrorCode(gotErr), "%q", b)
	default:
		require.Equal(t, pigeon.ErrorCode(wantErr), pigeon.ErrorCode(gotErr), "%q", b)
		if wantErr == nil || !pulled {
			requireSameFrame(t, want, got, "%q", b)
		}
	}
	if gotErr != nil || !pulled {
		return
	}
	var raw struct {
		Attempts *[]json.RawMessage `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal(b, &raw), "%q", b)
	if raw.Attempts == nil {
		require.Nil(t, got.Attempts, "%q", b)
		return
	}
	entries := make([]int, 0, len(*raw.Attempts))
	for _, e := range *raw.Attempts {
		n, err := strconv.ParseInt(string(e), 10, strconv.IntSize)
		if err != nil {
			n = 0
		}
		entries = append(entries, int(n))
	}
	require.Equal(t, entries, got.Attempts, "%q", b)
}
