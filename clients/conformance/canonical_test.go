package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// canonicalCases are data texts at the edges of the canonical form
// (RFC 8785 as the broker writes it, docs/security.md): number forms,
// escapes, member order by UTF-16 code units, and what has no canonical
// form (lone surrogates, duplicate names, numbers a double cannot keep).
// vectors/canonical.json holds the signing input Go builds for each, or
// that Go refuses it; every client's suite builds the same from the text.
var canonicalCases = []struct{ name, data string }{
	{"number 1e21", `1e21`},
	{"number 1e20", `1e20`},
	{"number -0", `-0`},
	{"number -0.0", `-0.0`},
	{"number 0e10", `0e10`},
	{"number 5e-324", `5e-324`},
	{"number 1.7976931348623157e308", `1.7976931348623157e308`},
	{"number 2^53", `9007199254740992`},
	{"number 1E+2", `1E+2`},
	{"number 0.1e1", `0.1e1`},
	{"number -1e-7", `-1e-7`},
	{"number 1e-6", `1e-6`},
	{"number 123e-20", `123e-20`},
	{"number 4.35", `4.35`},
	{"number 1e23", `100000000000000000000000`},
	{"number 12345678901234567000", `12345678901234567000`},
	{"numbers in an array", `[1e+21,1e-7,1e20,0.000001,-0]`},
	{"number 2^53+1 (refused)", `9007199254740993`},
	{"number -(2^53+1) (refused)", `-9007199254740993`},
	{"number int64 id (refused)", `1234567890123456789`},
	{"number 2^64-1 (refused)", `18446744073709551615`},
	{"number 2^64 (refused)", `18446744073709551616`},
	{"number 2^68 (refused)", `295147905179352825856`},
	{"number 0.10000000000000001 (refused)", `0.10000000000000001`},
	{"number 9.999999999999999e22 (refused)", `9.999999999999999e22`},
	{"number 2.5e-324 (refused)", `2.5e-324`},
	{"number 1e-400 (refused)", `1e-400`},
	{"number 1e400 (refused)", `1e400`},
	{"number -1e400 (refused)", `-1e400`},
	{"escapes of controls, U+007F, U+2028, U+2029 and solidus", `"\u0000\u001f\u007f\u2028\u2029\/\b\f\n\r\t\"\\"`},
	{"escaped surrogate pair", `"\ud83d\ude00"`},
	{"lone high surrogate (refused)", `"\ud800"`},
	{"lone low surrogate (refused)", `"\udc00"`},
	{"high surrogate before a letter (refused)", `"\ud800x"`},
	{"two high surrogates (refused)", `"a\ud800\ud800"`},
	{"lone surrogate in a name (refused)", `{"\ud800":1}`},
	{"duplicate names (refused)", `{"a":1,"a":2}`},
	{"duplicate names, nested (refused)", `{"a":{"b":1,"b":1}}`},
	{"duplicate names, one escaped (refused)", `{"a":1,"\u0061":2}`},
	{"names by UTF-16 code units, non-BMP before U+E000", `{"\ud83d\ude00":1,"\uff61":2,"\ue000":3,"a":4}`},
	{"names by UTF-16 code units, U+10000 before U+FB33", `{"\ufb33":1,"\ud800\udc00":2}`},
	{"names not normalised", `{"\u00e9":1,"e\u0301":2}`},
	{"empty name and NUL name", `{"":1,"\u0000":2}`},
	{"nested and whitespace", ` { "b" : [ 1 , { "d" : null , "c" : true } ] , "a" : { } } `},
	{"empty string", `""`},
	{"empty array", `[]`},
}

type canonicalVectors struct {
	Note    string          `json:"note"`
	Subject string          `json:"subject"`
	ID      string          `json:"id"`
	Time    string          `json:"time"`
	Cases   []canonicalCase `json:"cases"`
	// EnvelopeNote says how to read Envelopes.
	EnvelopeNote string         `json:"envelopeNote"`
	Envelopes    []envelopeCase `json:"envelopes"`
}

// envelopeCase is a whole message as JSON text (subject, id and time of the
// file, data {"k":"v"}, and the members the case is about), with what Go
// does with it: the text decoded by encoding/json into a pigeon.Message,
// then CanonicalSigningInput. Each client parses the same text with its
// own reader and compares; where a client's documented behaviour differs
// from Go's (a v of 0 or null, which Go reads as absent), its test says so
// by case name.
type envelopeCase struct {
	Name    string `json:"name"`
	Message string `json:"message"`
	// SigningInput is Go's CanonicalSigningInput of the decoded message.
	SigningInput string `json:"signingInput,omitempty"`
	// Refused is "decode" when encoding/json refuses the text (a member
	// of the wrong type), "signingInput" when CanonicalSigningInput
	// refuses the message (ENVELOPE_INVALID); empty when Go signs it.
	Refused string `json:"refused,omitempty"`
	// DecodeMessage is what the broker's reader, pigeon.DecodeMessage,
	// does with the text: "ok", or the code it refuses it with. When it
	// accepts, CanonicalSigningInput of its message is Go's outcome above.
	DecodeMessage string `json:"decodeMessage"`
	// Go says, for a case where Go's reading is its own, what Go does.
	Go string `json:"go,omitempty"`
}

// coveredFields are the envelope strings the second form covers, in
// its order.
var coveredFields = []string{"type", "intent", "idempotencyKey", "replyTo", "correlationId", "reason"}

// envelopeStrings are JSON texts of string values (or null, or no member)
// at the edges of JCS string escaping; each is set in each covered field.
var envelopeStrings = []struct{ name, text string }{
	{"absent", ""},
	{"null", `null`},
	{"empty string", `""`},
	{"U+2028 and U+2029 escaped", `"a\u2028b\u2029c"`},
	{"U+2028 and U+2029 raw", "\"a\u2028b\u2029c\""},
	{"DEL escaped", `"\u007f"`},
	{"DEL raw", "\"a\x7fb\""},
	{"every C0 control escaped", `"` + allC0() + `"`},
	{"short escapes", `"\b\f\n\r\t"`},
	{"quote, backslash, solidus", `"\"\\/"`},
	{"escaped solidus", `"\/a\/"`},
	{"astral raw", `"😀𝄞"`},
	{"astral escaped", `"\ud83d\ude00\ud834\udd1e"`},
	{"non-ASCII", `"héllo ☃ ǅ Ω"`},
	{"not normalised (e and U+0301)", `"e\u0301 \u00e9"`},
	{"HTML characters", `"<a href='x'>&amp;</a>"`},
	{"256 ASCII bytes", `"` + strings.Repeat("x", 256) + `"`},
	{"256 bytes of astral characters", `"` + strings.Repeat("😀", 64) + `"`},
	{"256 bytes, 2-byte characters and controls", `"` + strings.Repeat("é\\u0001", 85) + `x"`},
}

func allC0() string {
	var b strings.Builder
	for c := 0; c < 0x20; c++ {
		fmt.Fprintf(&b, "\\u%04x", c)
	}
	return b.String()
}

// envelopeMessage is the JSON text of a message with the file's subject,
// id and time, data {"k":"v"}, and members (name and JSON text each, in
// order; an empty text leaves the member out).
func envelopeMessage(v canonicalVectors, members ...[2]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"subject":%q,"id":%q,"time":%q`, v.Subject, v.ID, v.Time)
	for _, m := range members {
		if m[1] != "" {
			fmt.Fprintf(&b, `,%q:%s`, m[0], m[1])
		}
	}
	b.WriteString(`,"data":{"k":"v"}}`)
	return b.String()
}

// allSix sets every covered field to a different edge string.
var allSix = [][2]string{
	{"type", `"t\u2028\u007f"`}, {"intent", `"\u0000i\"\\"`}, {"idempotencyKey", `"k😀\/"`},
	{"replyTo", `"r\u001f\u2029"`}, {"correlationId", `"c\ud83d\ude00é"`}, {"reason", `"why\n\t"`},
}

const testSig = `"kid":"sig-1","alg":"ed25519","sig":"` + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" + `"`

func envelopeCases(v canonicalVectors) []struct{ name, msg, goNote string } {
	var cs []struct{ name, msg, goNote string }
	add := func(name, goNote string, members ...[2]string) {
		cs = append(cs, struct{ name, msg, goNote string }{name, envelopeMessage(v, members...), goNote})
	}
	for _, f := range coveredFields {
		for _, s := range envelopeStrings {
			add(f+": "+s.name, "", [2]string{f, s.text})
		}
	}
	add("reason: lone surrogate escaped", "encoding/json reads the escape as U+FFFD, so CanonicalSigningInput signs U+FFFD; the broker's DecodeMessage refuses the text",
		[2]string{"reason", `"a\ud800b"`})
	add("type: a number (refused)", "", [2]string{"type", `5`})
	add("intent: true (refused)", "", [2]string{"intent", `true`})
	add("replyTo: an object (refused)", "", [2]string{"replyTo", `{}`})
	add("every covered field set", "", allSix...)
	add("every covered field null", "", [][2]string{{"type", "null"}, {"intent", "null"}, {"idempotencyKey", "null"},
		{"replyTo", "null"}, {"correlationId", "null"}, {"reason", "null"}}...)
	add("every covered field empty", "", [][2]string{{"type", `""`}, {"intent", `""`}, {"idempotencyKey", `""`},
		{"replyTo", `""`}, {"correlationId", `""`}, {"reason", `""`}}...)
	add("type set, intent empty", "", [2]string{"type", `"x"`}, [2]string{"intent", `""`})
	add("type empty, intent set", "", [2]string{"type", `""`}, [2]string{"intent", `"x"`})
	add("replyTo and correlationId, reason null", "", [2]string{"replyTo", `"_INBOX.a\u2028"`}, [2]string{"correlationId", `"\u0000"`}, [2]string{"reason", `null`})
	add("members in another order", "", [2]string{"reason", `"r"`}, [2]string{"replyTo", `"p"`}, [2]string{"type", `"t"`}, [2]string{"intent", `"i"`},
		[2]string{"correlationId", `"c"`}, [2]string{"idempotencyKey", `"k"`})
	add("uncovered fields do not enter", "", append([][2]string{{"specversion", `"1.0"`}, {"source", `"s\u2028"`}, {"classification", `"pci"`},
		{"region", `"uk"`}, {"sequence", `7`}, {"contractId", `"ctr"`}, {"subjectId", `"sid"`}, {"schemaId", `"sch"`},
		{"acceptedAt", `"2026-11-29T12:00:01Z"`}, {"hops", `3`}}, [2]string{"type", `"t"`})...)

	// The form a signature names. Every covered field is set, so the two
	// forms differ.
	sig := func(name, goNote, v string) {
		s := "{" + testSig
		if v != "" {
			s += `,"v":` + v
		}
		add(name, goNote, append(append([][2]string{}, allSix...), [2]string{"signature", s + "}"})...)
	}
	add("signature null: second form", "", append(append([][2]string{}, allSix...), [2]string{"signature", "null"})...)
	sig("signature without v: first form", "", "")
	sig("signature v 2: second form", "", "2")
	sig("signature v 0", "encoding/json reads v 0 as absent (Signature.V is 0): the first form; docs/security.md: the broker reads 0 as absent", "0")
	sig("signature v null", "encoding/json reads v null as absent (Signature.V is 0): the first form; docs/security.md: the broker reads null as absent", "null")
	sig("signature v 1 (refused)", "", "1")
	sig("signature v 3 (refused)", "", "3")
	sig("signature v -2 (refused)", "", "-2")
	sig("signature v 20 (refused)", "", "20")
	sig("signature v 2.0 (refused)", "", "2.0")
	sig("signature v 2e0 (refused)", "", "2e0")
	sig("signature v 2.5 (refused)", "", "2.5")
	sig(`signature v "2" (refused)`, "", `"2"`)
	sig("signature v true (refused)", "", "true")
	sig("signature v 2^64 (refused)", "", "18446744073709551616")
	return cs
}

type canonicalCase struct {
	Name string `json:"name"`
	Data string `json:"data"`
	// SigningInput is Go's CanonicalSigningInput; empty when Go refuses
	// the data (ENVELOPE_INVALID), and then Refused is true.
	SigningInput string `json:"signingInput,omitempty"`
	Refused      bool   `json:"refused,omitempty"`
}

func goCanonicalVectors(t *testing.T) canonicalVectors {
	v := canonicalVectors{
		Note:    "Generated by `go test ./clients/conformance -run TestCanonicalVectors -update`: Go's signing input of each data text, or refused.",
		Subject: "chat.messages", ID: "msg_canonical", Time: "2026-11-29T12:00:00Z",
	}
	for _, c := range canonicalCases {
		require.True(t, json.Valid([]byte(c.data)), c.name)
		m := &pigeon.Message{Subject: v.Subject, ID: v.ID, Time: v.Time, Data: json.RawMessage(c.data)}
		in, err := pigeon.CanonicalSigningInput(m)
		cc := canonicalCase{Name: c.name, Data: c.data}
		if err != nil {
			var pe *pigeon.Error
			require.True(t, errors.As(err, &pe) && pe.Code == pigeon.CodeEnvelopeInvalid, "%s: %v", c.name, err)
			cc.Refused = true
		} else {
			cc.SigningInput = string(in)
		}
		v.Cases = append(v.Cases, cc)
	}
	v.EnvelopeNote = "Each envelope case is a message's JSON text; signingInput is Go's CanonicalSigningInput of the message encoding/json decodes from it, " +
		"refused is \"decode\" when encoding/json refuses the text and \"signingInput\" when CanonicalSigningInput does (ENVELOPE_INVALID), " +
		"decodeMessage is what the broker's reader (pigeon.DecodeMessage) does with it, and go notes where Go's reading is its own."
	for _, c := range envelopeCases(v) {
		require.True(t, json.Valid([]byte(c.msg)), "%s: %s", c.name, c.msg)
		ec := envelopeCase{Name: c.name, Message: c.msg, Go: c.goNote}
		var m pigeon.Message
		if err := json.Unmarshal([]byte(c.msg), &m); err != nil {
			ec.Refused = "decode"
		} else if in, err := pigeon.CanonicalSigningInput(&m); err != nil {
			var pe *pigeon.Error
			require.True(t, errors.As(err, &pe) && pe.Code == pigeon.CodeEnvelopeInvalid, "%s: %v", c.name, err)
			ec.Refused = "signingInput"
		} else {
			ec.SigningInput = string(in)
		}
		dm, err := pigeon.DecodeMessage([]byte(c.msg))
		if err != nil {
			var pe *pigeon.Error
			require.True(t, errors.As(err, &pe), "%s: %v", c.name, err)
			ec.DecodeMessage = string(pe.Code)
		} else {
			ec.DecodeMessage = "ok"
			in, err := pigeon.CanonicalSigningInput(dm)
			if ec.Refused != "" {
				require.Error(t, err, "%s: DecodeMessage's message has a signing input, encoding/json's none", c.name)
			} else {
				require.NoError(t, err, c.name)
				require.Equal(t, ec.SigningInput, string(in), "%s: DecodeMessage and encoding/json differ", c.name)
			}
		}
		v.Envelopes = append(v.Envelopes, ec)
	}
	return v
}

// TestCanonicalVectors checks vectors/canonical.json, which the clients'
// suites read, against Go's CanonicalSigningInput. With -update it writes
// the file first.
func TestCanonicalVectors(t *testing.T) {
	requireVectors(t, "canonical.json", "TestCanonicalVectors", goCanonicalVectors(t))
}

// requireVectors requires vectors/name to hold want, what Go computes now
// (test: the test that rewrites it with -update); with -update it writes
// want there first.
func requireVectors[V any](t *testing.T, name, test string, want V) {
	t.Helper()
	path := filepath.Join("vectors", name)
	if *update {
		b, err := json.MarshalIndent(want, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var got V
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, want, got, "vectors/%s is stale (go test ./clients/conformance -run %s -update rewrites it)", name, test)
}
