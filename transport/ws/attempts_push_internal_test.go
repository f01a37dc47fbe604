package ws

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// pushedFrames are deliver and deliver_batch pushes, and frames beside
// them, as the client's reader decodes them (decodeFromServer): the
// attempt of each delivery they decode to (a deliver's alone, or each
// entry's), or the code of their refusal. 0 is no lease's attempt, which
// the session refuses for its delivery alone.
var pushedFrames = []struct {
	name, in string
	attempts []int
	code     pigeon.Code
}{
	{"a deliver as the broker writes it", `{"op":"deliver","sub":"s","attempt":2,"message":{"id":"m","sequence":1}}`, []int{2}, ""},
	{"a deliver_batch as the broker writes it", `{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"a"}},{"attempt":2,"message":{"id":"b"}}]}`, []int{1, 2}, ""},
	{"a deliver without an attempt", `{"op":"deliver","sub":"s","message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt null", `{"op":"deliver","sub":"s","attempt":null,"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt no integer", `{"op":"deliver","sub":"s","attempt":1.5,"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt 1.0", `{"op":"deliver","sub":"s","attempt":1.0,"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt beyond 2^63-1", `{"op":"deliver","sub":"s","attempt":9223372036854775808,"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt a string", `{"op":"deliver","sub":"s","attempt":"2","message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt an object", `{"op":"deliver","sub":"s","attempt":{"n":[1]},"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt named with an escape", `{"op":"deliver","sub":"s","att\u0065mpt":true,"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's op with an escape", `{"op":"d\u0065liver","sub":"s","attempt":[1],"message":{"id":"m"}}`, []int{0}, ""},
	{"a deliver's attempt last", `{"op":"deliver","sub":"s","message":{"id":"m"},"attempt":1e0}`, []int{0}, ""},
	{"a deliver_batch's entries no integer", `{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1.5,"message":{"id":"a"}},{"attempt":2,"message":{"id":"b"}},{"message":{"id":"c"},"attempt":"3"},{"attempt":null,"message":{"id":"d"}},{"attempt":4,"message":{"id":"e"}}]}`,
		[]int{0, 2, 0, 0, 4}, ""},
	{"a deliver_batch beside an unknown member", " {\"op\":\"deliver_batch\" , \"note\":{},\"sub\":\"s\",\"deliveries\":[ {\"x\":1, \"att\\u0065mpt\" : false,\"message\":{\"id\":\"a\"}} , {\"attempt\":5,\"message\":{\"id\":\"b\"}}]} ",
		[]int{0, 5}, ""},
	{"an attempt in a message, not the push's", `{"op":"deliver","sub":"s","attempt":1,"message":{"id":"m","attempt":1.5}}`, []int{1}, ""},
	// An entry malformed otherwise is left out alone (decodeFromServer),
	// its attempt as encoding/json reads it.
	{"an entry's message malformed too", `{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1.5,"message":{"id":"a"}},{"attempt":1,"message":{"id":7}}]}`,
		[]int{0, 1}, ""},
	{"a deliver_batch entry no object", `{"op":"deliver_batch","sub":"s","deliveries":[null,{"attempt":1.5,"message":{"id":"b"}}]}`, []int{0, 0}, ""},
	// A deliver's message malformed is left out the same way, its attempt
	// read apart beside it.
	{"a message malformed too", `{"op":"deliver","sub":"s","attempt":1.5,"message":{"id":"m","sequence":"1"}}`, []int{0}, ""},
	{"a message malformed, the attempt not", `{"op":"deliver","sub":"s","attempt":3,"message":{"id":"m","sequence":"1"}}`, []int{3}, ""},
	// Members the broker does not write beside them: a deliver_batch's
	// own attempt, a deliver's empty deliveries.
	{"a deliver_batch's own attempt beside an entry's", `{"op":"deliver_batch","sub":"s","attempt":1,"deliveries":[{"attempt":1.5,"message":{"id":"a"}}]}`, []int{0}, ""},
	{"a deliver's empty deliveries", `{"op":"deliver","sub":"s","attempt":1.5,"message":{"id":"a"},"deliveries":[]}`, []int{0}, ""},
	// Refused whole, as before: something else is wrong, or text readers
	// could take differently.
	{"another case", `{"op":"deliver","sub":"s","Attempt":1.5,"message":{"id":"m"}}`, nil, pigeon.CodeBadRequest},
	{"two attempts", `{"op":"deliver","sub":"s","attempt":1.5,"att\u0065mpt":2,"message":{"id":"m"}}`, nil, pigeon.CodeDuplicateKey},
	{"an entry's two attempts", `{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1.5,"attempt":2,"message":{"id":"m"}}]}`, nil, pigeon.CodeDuplicateKey},
	{"the sub malformed too", `{"op":"deliver","sub":1,"attempt":1.5,"message":{"id":"m"}}`, nil, pigeon.CodeBadRequest},
	{"deliveries no list", `{"op":"deliver_batch","sub":"s","deliveries":{"attempt":1.5}}`, nil, pigeon.CodeBadRequest},
	{"a deliver_batch's own attempt", `{"op":"deliver_batch","sub":"s","attempt":1.5,"deliveries":[{"attempt":1,"message":{"id":"a"}}]}`, nil, pigeon.CodeBadRequest},
	{"a deliver's entries", `{"op":"deliver","sub":"s","attempt":1,"message":{"id":"m"},"deliveries":[{"attempt":1.5}]}`, nil, pigeon.CodeBadRequest},
	{"an ok", `{"op":"ok","re":"r","attempt":1.5}`, nil, pigeon.CodeBadRequest},
	{"the op no string", `{"op":7,"attempt":1.5}`, nil, pigeon.CodeBadRequest},
	{"no JSON", `{"op":"deliver","attempt":1.5,`, nil, pigeon.CodeBadRequest},
}

// TestFromServerReadsPushedAttemptsApart: the client's reader reads a
// deliver's attempt, and a deliver_batch entry's, apart from the rest of
// the push: one that is no integer an int holds decodes as 0, and the
// deliveries beside it keep their own; a push refused for anything else
// is refused whole, as decodeClientFrame refuses it.
func TestFromServerReadsPushedAttemptsApart(t *testing.T) {
	for _, tc := range pushedFrames {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.in)
			requirePushedSound(t, b)
			f, err := decodeFromServer(b, &interner{})
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%v", err)
			if tc.code != "" {
				return
			}
			require.Equal(t, tc.attempts, pushedAttempts(f))
			require.Equal(t, "s", f.Sub)
			for _, d := range f.Deliveries {
				if d.Message != nil {
					require.NotEmpty(t, d.Message.ID)
				}
			}
		})
	}
}

// FuzzFromServerPush holds decodeFromServer to what it guarantees of
// every frame (requireEntriesSound), and the attempts of a push it takes
// to encoding/json's reading of each as an integer.
func FuzzFromServerPush(f *testing.F) {
	for _, tc := range pushedFrames {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		requirePushedSound(t, b)
	})
}

// requirePushedSound holds the client's reader's decoding of b to what
// it guarantees (requireEntriesSound: the same frame and error as
// decodeClientFrame, but for a frame it reads apart), and, for a deliver
// or a deliver_batch it takes, the attempt of each of its deliveries to
// encoding/json's reading of it as an integer, 0 when it is none: a
// deliver's own "attempt", each deliver_batch entry's; whatever else the
// push holds.
func requirePushedSound(t *testing.T, b []byte) {
	t.Helper()
	requireEntriesSound(t, b)
	got, err := decodeFromServer(b, &interner{})
	if err != nil || got.Op != OpDeliver && got.Op != OpDeliverBatch {
		return
	}
	var top map[string]json.RawMessage // each name once: CheckJSON accepts what is taken
	require.NoError(t, json.Unmarshal(b, &top), "%q", b)
	var entries []json.RawMessage
	if got.Op == OpDeliver {
		entries = []json.RawMessage{top["attempt"]}
	} else {
		var list []json.RawMessage
		if raw := top["deliveries"]; raw != nil {
			require.NoError(t, json.Unmarshal(raw, &list), "%q", b)
		}
		require.Len(t, got.Deliveries, len(list), "%q", b)
		for _, e := range list {
			var entry struct {
				Attempt json.RawMessage `json:"attempt"`
			}
			_ = json.Unmarshal(e, &entry) // an entry no object has none
			entries = append(entries, entry.Attempt)
		}
	}
	read := make([]int, len(entries))
	for i, e := range entries {
		if n, err := strconv.ParseInt(string(e), 10, strconv.IntSize); err == nil {
			read[i] = int(n)
		}
	}
	require.Equal(t, read, pushedAttempts(got), "%q", b)
}

// pushedAttempts are the attempts of the deliveries of the push f: its
// own (a deliver), or each entry's.
func pushedAttempts(f *Frame) []int {
	if f.Op == OpDeliver {
		return []int{f.Attempt}
	}
	out := make([]int, len(f.Deliveries))
	for i, d := range f.Deliveries {
		out[i] = d.Attempt
	}
	return out
}
