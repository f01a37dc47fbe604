package ws

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// entryText is a stored message id at sequence 5, as the broker writes
// it, with the members rest after "data".
func entryText(id, rest string) string {
	return `{"specversion":"1.0","id":"` + id + `","type":"job","source":"p","subject":"jobs.run","time":"2026-01-01T00:00:00Z","sequence":5,"data":{}` + rest + `}`
}

// listFrames are deliver_batch pushes and messages answers as the
// client's reader decodes them (decodeFromServer): the ids of the
// messages of the entries it keeps, in order ("-" for an entry kept
// without a message, null), and the indexes of those it leaves out; or
// the code of its refusal.
var listFrames = []struct {
	name, in string
	kept     []string
	left     []int
	code     pigeon.Code
}{
	{"a deliver_batch as the broker writes it",
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":` + entryText("a", "") + `},{"attempt":2,"message":` + entryText("b", "") + `}]}`,
		[]string{"a", "b"}, nil, ""},
	{"a deliver_batch entry's sequence a string",
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":` + entryText("a", "") + `},{"attempt":2,"message":{"id":"x","sequence":"5"}},{"attempt":3,"message":` + entryText("b", "") + `}]}`,
		[]string{"a", "-", "b"}, []int{1}, ""},
	{"deliver_batch entries no objects",
		`{"op":"deliver_batch","sub":"s","deliveries":[7,{"attempt":1,"message":` + entryText("a", "") + `},"x",[],{"attempt":2,"message":7},null]}`,
		[]string{"-", "a", "-", "-", "-", "-"}, []int{0, 2, 3, 4}, ""},
	{"a deliver_batch entry's message's id a number, its attempt no integer",
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1.5,"message":{"id":7,"sequence":5}},{"attempt":1,"message":` + entryText("a", "") + `}]}`,
		[]string{"-", "a"}, []int{0}, ""},
	{"a deliver_batch entry with a name in another case",
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"x","Sequence":5}},{"attempt":1,"message":` + entryText("a", "") + `}]}`,
		[]string{"-", "a"}, []int{0}, ""},
	{"a deliver_batch entry's hops beyond 2^32-1, beside an escaped name",
		` {"op":"deliver_batch" , "s\u0075b":"s","deliveries":[ {"attempt":1,"message":` + entryText("x", `,"hops":4294967296`) + `} , {"attempt":1,"message":` + entryText("a", "") + `} ] } `,
		[]string{"-", "a"}, []int{0}, ""},
	{"every deliver_batch entry bad",
		`{"op":"deliver_batch","sub":"s","deliveries":[1,2,3]}`,
		[]string{"-", "-", "-"}, []int{0, 1, 2}, ""},
	{"a receive answer's entry's sequence negative",
		`{"op":"messages","re":"r","messages":[` + entryText("a", "") + `,{"id":"x","sequence":-5},` + entryText("b", "") + `],"attempts":[1,2,3]}`,
		[]string{"a", "-", "b"}, []int{1}, ""},
	{"a receive answer's entry's time a number, an attempt no integer",
		`{"op":"messages","re":"r","attempts":[1.5,2],"messages":[` + entryText("a", "") + `,{"id":"x","sequence":5,"time":1}]}`,
		[]string{"a", "-"}, []int{1}, ""},
	{"a replay answer's entries no messages",
		`{"op":"messages","re":"r","messages":[true,` + entryText("a", "") + `,null,{"id":"x","signature":"s"}]}`,
		[]string{"-", "a", "-", "-"}, []int{0, 3}, ""},
	// Refused whole: text readers could take differently, or something
	// beside the lists is wrong.
	{"a name twice in an entry",
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"x","id":"y"}},{"attempt":1,"message":` + entryText("a", "") + `}]}`,
		nil, nil, pigeon.CodeDuplicateKey},
	{"a name twice in an entry's data",
		`{"op":"messages","re":"r","messages":[` + entryText("a", "") + `,{"id":"x","sequence":"5","data":{"k":1,"k":2}}]}`,
		nil, nil, pigeon.CodeDuplicateKey},
	{"a lone surrogate in an entry",
		`{"op":"messages","re":"r","messages":[` + entryText("a", "") + `,{"id":"\ud800","sequence":"5"}]}`,
		nil, nil, pigeon.CodeInvalidUTF8},
	{"the sub malformed too",
		`{"op":"deliver_batch","sub":1,"deliveries":[{"attempt":1,"message":{"id":7}}]}`,
		nil, nil, pigeon.CodeBadRequest},
	{"deliveries no list",
		`{"op":"deliver_batch","sub":"s","deliveries":{"attempt":1,"message":{"id":7}}}`,
		nil, nil, pigeon.CodeBadRequest},
	{"messages no list",
		`{"op":"messages","re":"r","messages":7}`,
		nil, nil, pigeon.CodeBadRequest},
	{"attempts no list beside a bad entry",
		`{"op":"messages","re":"r","messages":[{"id":7}],"attempts":{}}`,
		nil, nil, pigeon.CodeBadRequest},
	{"messages in another case",
		`{"op":"messages","re":"r","Messages":[{"id":7}]}`,
		nil, nil, pigeon.CodeBadRequest},
	{"an ok's messages",
		`{"op":"ok","re":"r","messages":[{"id":7}]}`,
		nil, nil, pigeon.CodeBadRequest},
	{"a reply's message",
		`{"op":"reply","re":"r","message":{"id":7}}`,
		nil, nil, pigeon.CodeEnvelopeInvalid},
}

// TestFromServerReadsEntriesApart: the client's reader reads the list of
// a deliver_batch or a messages answer that decodeClientFrame refused
// entry by entry: each entry that decodes alone is kept, each other left
// out with its text; a frame refused for anything else, or whose text
// readers could take differently, is refused whole.
func TestFromServerReadsEntriesApart(t *testing.T) {
	for _, tc := range listFrames {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.in)
			requireEntriesSound(t, b)
			requireFromServerSound(t, b)
			f, err := decodeFromServer(b, &interner{})
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%v", err)
			if tc.code != "" {
				return
			}
			var kept []string
			var left []int
			each := func(i int, m *pigeon.Message) {
				switch {
				case f.Batch != nil && f.Batch[i] != nil:
					left = append(left, i)
					require.Nil(t, m)
					kept = append(kept, "-")
				case m == nil:
					kept = append(kept, "-")
				default:
					kept = append(kept, m.ID)
				}
			}
			if f.Op == OpDeliverBatch {
				require.Equal(t, "s", f.Sub)
				for i, d := range f.Deliveries {
					each(i, d.Message)
				}
			} else {
				require.Equal(t, "r", f.Re)
				for i, m := range f.Messages {
					each(i, m)
				}
			}
			require.Equal(t, tc.kept, kept)
			require.Equal(t, tc.left, left)
		})
	}
}

// requireEntriesSound holds decodeFromServer to decodeClientFrame on b.
// Where decodeClientFrame decodes b, decodeFromServer decodes it to the
// same frame (but for a messages answer whose "attempts" is null, which
// it refuses, BAD_REQUEST). Where it refuses b, decodeFromServer refuses
// it too, with the same code (or, a messages answer, BAD_REQUEST), or
// takes it only when it is a deliver or a deliver_batch or messages
// answer CheckJSON accepts, refused BAD_REQUEST; then, for a list frame,
// the frame without its lists (each written []) decodes to the frame
// taken, but for the lists; and the list taken keeps exactly the entries
// that decode alone (each as the only entry of a frame of its op), each
// as it decodes, the others left out (nil) with their text in Batch, a
// delivery's attempt as encoding/json reads it; a messages answer's
// attempts are encoding/json's reading of each entry as an integer.
func requireEntriesSound(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := decodeClientFrame(b, &interner{})
	got, gotErr := decodeFromServer(b, &interner{})
	if wantErr == nil {
		if gotErr != nil {
			require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(gotErr), "%q", b)
			require.Equal(t, OpMessages, want.Op, "%q", b)
			require.Nil(t, want.Attempts, "%q", b)
		}
		requireSameFrame(t, want, got, "%q", b)
		return
	}
	if gotErr != nil {
		if got == nil || got.Op != OpMessages || pigeon.ErrorCode(gotErr) != pigeon.CodeBadRequest {
			require.Equal(t, pigeon.ErrorCode(wantErr), pigeon.ErrorCode(gotErr), "%q", b)
		}
		return
	}
	// Taken where decodeClientFrame refused it.
	require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(wantErr), "%q", b)
	require.NoError(t, pigeon.CheckJSON(b), "%q", b)
	require.Contains(t, []string{OpDeliver, OpDeliverBatch, OpMessages}, got.Op, "%q", b)
	var top map[string]json.RawMessage // CheckJSON accepted b: each name once
	require.NoError(t, json.Unmarshal(b, &top), "%q", b)
	if got.Op == OpDeliver {
		// Its attempt alone, no integer, read as 0.
		a, ok := top["attempt"]
		require.True(t, ok, "%q", b)
		_, err := strconv.ParseInt(string(a), 10, strconv.IntSize)
		require.Error(t, err, "%q", b)
		require.Zero(t, got.Attempt, "%q", b)
		top["attempt"] = json.RawMessage("0")
		rest, err := json.Marshal(top)
		require.NoError(t, err)
		r, err := decodeClientFrame(rest, &interner{})
		require.NoError(t, err, "%q", b)
		requireSameFrame(t, r, got, "%q", b)
		return
	}
	name := "messages"
	if got.Op == OpDeliverBatch {
		name = "deliveries"
	}
	var entries []json.RawMessage
	if raw, ok := top[name]; ok {
		require.NoError(t, json.Unmarshal(raw, &entries), "%q", b)
	}
	var attempts []int
	if raw, ok := top["attempts"]; ok && got.Op == OpMessages {
		var list []json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &list), "%q", b)
		attempts = []int{}
		for _, e := range list {
			n, err := strconv.ParseInt(string(e), 10, strconv.IntSize)
			if err != nil {
				n = 0
			}
			attempts = append(attempts, int(n))
		}
	}
	require.Equal(t, attempts, got.Attempts, "%q", b)

	// The frame without its lists.
	for _, k := range []string{name, "attempts"} {
		if v, ok := top[k]; ok && (k == name || got.Op == OpMessages) && string(v) != "null" {
			top[k] = json.RawMessage("[]")
		}
	}
	rest, err := json.Marshal(top)
	require.NoError(t, err)
	r, err := decodeClientFrame(rest, &interner{})
	require.NoError(t, err, "the frame without its lists: %q", b)
	bare := *got
	bare.Messages, bare.Deliveries, bare.Attempts, bare.Batch, bare.delivered = r.Messages, r.Deliveries, r.Attempts, nil, nil
	requireSameFrame(t, r, &bare, "%q", b)

	// The list, entry by entry.
	head := `{"op":"messages","messages":[`
	n := len(got.Messages)
	if got.Op == OpDeliverBatch {
		head, n = `{"op":"deliver_batch","deliveries":[`, len(got.Deliveries)
	}
	if top[name] == nil || string(top[name]) == "null" {
		require.Zero(t, n, "%q", b)
		require.Nil(t, got.Batch, "%q", b)
		return
	}
	require.Len(t, entries, n, "%q", b)
	anyLeft := false
	for i, e := range entries {
		alone, err := decodeClientFrame([]byte(head+string(e)+"]}"), &interner{})
		if err == nil {
			require.False(t, got.Batch != nil && got.Batch[i] != nil, "entry %d kept: %q", i, b)
			if got.Op == OpDeliverBatch {
				require.Equal(t, alone.Deliveries[0], got.Deliveries[i], "entry %d: %q", i, b)
			} else {
				require.Equal(t, alone.Messages[0], got.Messages[i], "entry %d: %q", i, b)
			}
			continue
		}
		anyLeft = true
		require.Len(t, got.Batch, n, "%q", b)
		require.Equal(t, string(e), string(got.Batch[i]), "entry %d left out with its text: %q", i, b)
		if got.Op == OpMessages {
			require.Nil(t, got.Messages[i], "%q", b)
			continue
		}
		require.Nil(t, got.Deliveries[i].Message, "%q", b)
		var d struct {
			Attempt json.RawMessage `json:"attempt"`
		}
		_ = json.Unmarshal(e, &d) // an entry no object has none
		a, err := strconv.ParseInt(string(d.Attempt), 10, strconv.IntSize)
		if err != nil {
			a = 0
		}
		require.Equal(t, int(a), got.Deliveries[i].Attempt, "entry %d: %q", i, b)
	}
	if !anyLeft {
		require.Nil(t, got.Batch, "%q", b)
	}
}
