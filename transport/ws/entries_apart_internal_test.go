package ws

import (
	"encoding/json"
	"maps"
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

// listFrames are deliver_batch pushes, messages and decisions answers,
// and deliver pushes, as the client's reader decodes them
// (decodeFromServer): the ids of the messages of the entries it keeps,
// in order ("-" for an entry kept without a message: null, a refusal; a
// deliver's one message is its entry 0), and the indexes of those it
// leaves out; or the code of its refusal.
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
	{"a decisions answer as the broker writes it",
		`{"op":"decisions","re":"r","results":[{"status":"accepted","message":` + entryText("a", "") + `},{"error":{"code":"FORBIDDEN","message":"m","details":{}}}]}`,
		[]string{"a", "-"}, nil, ""},
	{"a decisions result's message's sequence a string",
		`{"op":"decisions","re":"r","results":[{"status":"accepted","message":` + entryText("a", "") + `},{"status":"accepted","message":{"id":"x","sequence":"5"}},{"status":"duplicate","message":` + entryText("b", "") + `}]}`,
		[]string{"a", "-", "b"}, []int{1}, ""},
	{"decisions results no results the broker writes",
		`{"op":"decisions","re":"r","results":[7,{"status":"accepted","message":` + entryText("a", "") + `},"x",{"error":"refused"},{"error":{"code":7}},{"status":7},{"Status":"accepted"},null]}`,
		[]string{"-", "a", "-", "-", "-", "-", "-", "-"}, []int{0, 2, 3, 4, 5, 6}, ""},
	{"a deliver's message's sequence a string",
		`{"op":"deliver","sub":"s","attempt":1,"message":{"id":"x","sequence":"5"}}`,
		[]string{"-"}, []int{0}, ""},
	{"a deliver's message no object",
		`{"op":"deliver","sub":"s","attempt":1,"message":7}`,
		[]string{"-"}, []int{0}, ""},
	{"a deliver's message and attempt malformed, its message first",
		` {"op":"deliver","m\u0065ssage":{"id":7,"sequence":5},"sub":"s" , "attempt":1.5 } `,
		[]string{"-"}, []int{0}, ""},
	{"a deliver's attempt alone malformed",
		`{"op":"deliver","sub":"s","attempt":1.5,"message":` + entryText("a", "") + `}`,
		[]string{"a"}, nil, ""},
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
	{"a name twice in a decisions result",
		`{"op":"decisions","re":"r","results":[{"status":"accepted","status":"duplicate","message":` + entryText("a", "") + `},{"status":7}]}`,
		nil, nil, pigeon.CodeDuplicateKey},
	{"results no list",
		`{"op":"decisions","re":"r","results":{"status":7}}`,
		nil, nil, pigeon.CodeBadRequest},
	{"a decisions answer's re malformed too",
		`{"op":"decisions","re":1,"results":[{"status":7}]}`,
		nil, nil, pigeon.CodeBadRequest},
	{"a deliver's sub malformed too",
		`{"op":"deliver","sub":1,"attempt":1,"message":{"id":7}}`,
		nil, nil, pigeon.CodeBadRequest},
	{"a deliver's message in another case",
		`{"op":"deliver","sub":"s","attempt":1,"Message":{"id":7}}`,
		nil, nil, pigeon.CodeBadRequest},
	{"an ok's messages",
		`{"op":"ok","re":"r","messages":[{"id":7}]}`,
		nil, nil, pigeon.CodeBadRequest},
	{"a reply's message",
		`{"op":"reply","re":"r","message":{"id":7}}`,
		nil, nil, pigeon.CodeEnvelopeInvalid},
}

// TestFromServerReadsEntriesApart: the client's reader reads the list of
// a deliver_batch, a messages or a decisions answer that
// decodeClientFrame refused entry by entry, and a deliver's message
// apart from the rest: each entry that decodes alone is kept, each other
// left out with its text; a frame refused for anything else, or whose
// text readers could take differently, is refused whole.
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
			switch f.Op {
			case OpDeliver:
				require.Equal(t, "s", f.Sub)
				each(0, f.Message)
			case OpDeliverBatch:
				require.Equal(t, "s", f.Sub)
				for i, d := range f.Deliveries {
					each(i, d.Message)
				}
			case OpDecisions:
				require.Equal(t, "r", f.Re)
				for i, r := range f.Results {
					each(i, r.Message)
				}
			default:
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
// takes it only when it is a deliver, or a deliver_batch, messages or
// decisions answer, CheckJSON accepts, refused BAD_REQUEST or
// ENVELOPE_INVALID. Then, for a deliver, the frame with its attempt
// written 0 when it is no integer an int holds, and its message null,
// decodes to the frame taken, but for its message; and the message, when
// there is one, is the message of a deliver of nothing else, as it
// decodes, or, when that does not decode, nil with its text the frame's
// Batch's one entry. For a list frame, the frame without its lists (each
// written []) decodes to the frame taken, but for the lists; and the list
// taken keeps exactly the entries that decode alone (each as the only
// entry of a frame of its op), each as it decodes, the others left out
// (nil, a result of nothing) with their text in Batch, a delivery's
// attempt as encoding/json reads it; a messages answer's attempts are
// encoding/json's reading of each entry as an integer.
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
	require.Contains(t, []pigeon.Code{pigeon.CodeBadRequest, pigeon.CodeEnvelopeInvalid}, pigeon.ErrorCode(wantErr), "%q", b)
	require.NoError(t, pigeon.CheckJSON(b), "%q", b)
	require.Contains(t, []string{OpDeliver, OpDeliverBatch, OpMessages, OpDecisions}, got.Op, "%q", b)
	var top map[string]json.RawMessage // CheckJSON accepted b: each name once
	require.NoError(t, json.Unmarshal(b, &top), "%q", b)
	if got.Op == OpDeliver {
		requireDeliverSound(t, b, top, got)
		return
	}
	name := entryList(got.Op)
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
	bare.Messages, bare.Deliveries, bare.Results, bare.Attempts, bare.Batch, bare.delivered = r.Messages, r.Deliveries, r.Results, r.Attempts, nil, nil
	requireSameFrame(t, r, &bare, "%q", b)

	// The list, entry by entry.
	head := `{"op":"` + got.Op + `","` + name + `":[`
	n := len(got.Messages)
	switch got.Op {
	case OpDeliverBatch:
		n = len(got.Deliveries)
	case OpDecisions:
		n = len(got.Results)
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
			switch got.Op {
			case OpDeliverBatch:
				require.Equal(t, alone.Deliveries[0], got.Deliveries[i], "entry %d: %q", i, b)
			case OpDecisions:
				require.Equal(t, alone.Results[0], got.Results[i], "entry %d: %q", i, b)
			default:
				require.Equal(t, alone.Messages[0], got.Messages[i], "entry %d: %q", i, b)
			}
			continue
		}
		anyLeft = true
		require.Len(t, got.Batch, n, "%q", b)
		require.Equal(t, string(e), string(got.Batch[i]), "entry %d left out with its text: %q", i, b)
		switch got.Op {
		case OpMessages:
			require.Nil(t, got.Messages[i], "%q", b)
			continue
		case OpDecisions:
			require.Equal(t, BatchResult{}, got.Results[i], "%q", b)
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

// requireDeliverSound holds got, the deliver decodeFromServer took from
// b (its members top) where decodeClientFrame refused it, to what
// requireEntriesSound says of it: its attempt and its message read apart
// from the rest.
func requireDeliverSound(t *testing.T, b []byte, top map[string]json.RawMessage, got *Frame) {
	t.Helper()
	rest := maps.Clone(top)
	if a, ok := top["attempt"]; ok {
		if _, err := strconv.ParseInt(string(a), 10, strconv.IntSize); err != nil {
			require.Zero(t, got.Attempt, "an attempt no integer reads as 0: %q", b)
			rest["attempt"] = json.RawMessage("0")
		}
	}
	msg, apart := top["message"]
	apart = apart && string(msg) != "null"
	if apart {
		rest["message"] = json.RawMessage("null")
	}
	text, err := json.Marshal(rest)
	require.NoError(t, err)
	r, err := decodeClientFrame(text, &interner{})
	require.NoError(t, err, "the deliver without its attempt and message: %q", b)
	bare := *got
	bare.Batch = nil
	if apart {
		bare.Message = nil
	}
	requireSameFrame(t, r, &bare, "%q", b)
	if !apart {
		require.Nil(t, got.Batch, "%q", b)
		return
	}
	alone, err := decodeClientFrame([]byte(`{"op":"deliver","message":`+string(msg)+`}`), &interner{})
	if err == nil {
		require.Nil(t, got.Batch, "its message kept: %q", b)
		require.Equal(t, alone.Message, got.Message, "%q", b)
		return
	}
	require.Nil(t, got.Message, "%q", b)
	require.Len(t, got.Batch, 1, "%q", b)
	require.Equal(t, string(msg), string(got.Batch[0]), "its message left out with its text: %q", b)
}
