package conformance

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// timeSpellings are texts at the edges of RFC 3339 as the broker and the
// Go client read a time (signature.go's parseRFC3339, then
// time.Parse(time.RFC3339Nano)): a message's time, which the broker's
// gates check and which chooses the key that verifies a signature.
// vectors/times.json holds Go's reading of each, the instant or that Go
// refuses it; every client's suite reads each text with its own parser
// and compares.
var timeSpellings = []struct{ name, time string }{
	// Taken, in every form RFC 3339 gives.
	{"UTC", "2026-12-05T10:20:30Z"},
	{"the Unix epoch", "1970-01-01T00:00:00Z"},
	{"offset +01:00", "2026-12-05T10:20:30+01:00"},
	{"offset -23:59", "2026-12-05T10:20:30-23:59"},
	{"offset +23:59", "2026-12-05T10:20:30+23:59"},
	{"offset +05:30", "2026-12-05T10:20:30+05:30"},
	{"offset +00:00 with a fraction", "2026-12-05T10:20:30.000+00:00"},
	{"offset -00:00", "2026-12-05T10:20:30-00:00"},
	{"fraction and offset", "2026-12-05T10:20:30.5+01:00"},
	{"an offset into the previous day", "2026-01-01T00:00:00+01:00"},
	{"an offset into the next year", "2026-12-31T23:30:00-01:00"},

	// Fractions: any number of digits, the first nine kept, truncated.
	{"fraction of 1 digit", "2026-12-05T10:20:30.1Z"},
	{"fraction of 2 digits", "2026-12-05T10:20:30.12Z"},
	{"fraction of 3 digits", "2026-12-05T10:20:30.123Z"},
	{"fraction of 4 digits", "2026-12-05T10:20:30.1234Z"},
	{"fraction of 5 digits", "2026-12-05T10:20:30.12345Z"},
	{"fraction of 6 digits", "2026-12-05T10:20:30.123456Z"},
	{"fraction of 7 digits", "2026-12-05T10:20:30.1234567Z"},
	{"fraction of 8 digits", "2026-12-05T10:20:30.12345678Z"},
	{"fraction of 9 digits", "2026-12-05T10:20:30.123456789Z"},
	{"fraction of 10 digits", "2026-12-05T10:20:30.1234567891Z"},
	{"fraction of 11 digits", "2026-12-05T10:20:30.12345678912Z"},
	{"fraction of 12 digits", "2026-12-05T10:20:30.123456789123Z"},
	{"fraction of 15 digits", "2026-12-05T10:20:30.123456789123456Z"},
	{"fraction of 30 digits", "2026-12-05T10:20:30.999999999999999999999999999999Z"},
	{"fraction of 9 nines", "2026-12-05T10:20:30.999999999Z"},
	{"fraction of 6 nines, truncated", "2026-12-05T10:20:30.999999Z"},
	{"fraction of zeros", "2026-12-05T10:20:30.000000000Z"},
	{"fraction of 1 digit, leading zeros", "2026-12-05T10:20:30.000000001Z"},
	{"fraction before the epoch", "1969-12-31T23:59:59.9995Z"},
	{"fraction after the epoch", "1970-01-01T00:00:00.0005Z"},
	{"fraction with an offset", "2026-12-05T10:20:30.123456789-05:00"},

	// The calendar.
	{"29 February of a leap year", "2024-02-29T00:00:00Z"},
	{"29 February of 2000 (a fourth century)", "2000-02-29T00:00:00Z"},
	{"29 February of 2400", "2400-02-29T12:00:00Z"},
	{"29 February of 0004", "0004-02-29T00:00:00Z"},
	{"28 February of a common year", "2026-02-28T23:59:59Z"},
	{"31 January", "2026-01-31T00:00:00Z"},
	{"31 March", "2026-03-31T00:00:00Z"},
	{"30 April", "2026-04-30T00:00:00Z"},
	{"31 December", "2026-12-31T23:59:59Z"},
	{"year 0001", "0001-01-01T00:00:00Z"},
	{"year 0001 at an offset: an instant in year 0000", "0001-01-01T00:30:00+01:00"},
	{"year 0099", "0099-03-01T00:00:00Z"},
	{"year 1900", "1900-03-01T00:00:00Z"},
	{"year 9999", "9999-12-31T23:59:59.999Z"},
	{"year 9999 at its last nanosecond", "9999-12-31T23:59:59.999999999Z"},
	{"year 9999 at an offset: an instant in year 10000", "9999-12-31T23:59:59-01:00"},
	{"hour 23, minute 59, second 59", "2026-12-05T23:59:59Z"},

	// Refused: the calendar.
	{"29 February of a common year", "2026-02-29T00:00:00Z"},
	{"29 February of 1900 (a century)", "1900-02-29T00:00:00Z"},
	{"29 February of 2100", "2100-02-29T00:00:00Z"},
	{"29 February of 0100", "0100-02-29T00:00:00Z"},
	{"30 February", "2024-02-30T00:00:00Z"},
	{"31 April", "2026-04-31T10:20:30Z"},
	{"31 June", "2026-06-31T00:00:00Z"},
	{"31 September", "2026-09-31T00:00:00Z"},
	{"31 November", "2026-11-31T00:00:00Z"},
	{"day 32", "2026-12-32T10:20:30Z"},
	{"day 00", "2026-12-00T10:20:30Z"},
	{"month 13", "2026-13-05T10:20:30Z"},
	{"month 00", "2026-00-05T10:20:30Z"},
	{"year 0000", "0000-01-01T00:00:00Z"},
	{"year 0000, 29 February", "0000-02-29T00:00:00Z"},
	{"year 0000 at an offset: an instant in year 0001", "0000-12-31T23:30:00-01:00"},
	{"hour 24", "2026-12-05T24:00:00Z"},
	{"minute 60", "2026-12-05T23:60:00Z"},
	{"second 60", "2026-12-05T23:59:60Z"},
	{"second 60 of a leap second", "2016-12-31T23:59:60Z"},
	{"second 61", "2026-12-05T23:59:61Z"},

	// Refused: the syntax.
	{"lower-case t", "2026-12-05t10:20:30Z"},
	{"lower-case z", "2026-12-05T10:20:30z"},
	{"lower-case t and z", "2026-12-05t10:20:30z"},
	{"a space for T", "2026-12-05 10:20:30Z"},
	{"an underscore for T", "2026-12-05_10:20:30Z"},
	{"no offset", "2026-12-05T10:20:30"},
	{"no offset, a fraction", "2026-12-05T10:20:30.5"},
	{"offset +24:00", "2026-12-05T10:20:30+24:00"},
	{"offset -24:00", "2026-12-05T10:20:30-24:00"},
	{"offset +00:60", "2026-12-05T10:20:30+00:60"},
	{"offset +99:99", "2026-12-05T10:20:30+99:99"},
	{"offset +0100", "2026-12-05T10:20:30+0100"},
	{"offset +01", "2026-12-05T10:20:30+01"},
	{"offset +1:00", "2026-12-05T10:20:30+1:00"},
	{"offset +01:0a", "2026-12-05T10:20:30+01:0a"},
	{"offset +01:00:00", "2026-12-05T10:20:30+01:00:00"},
	{"offset after Z", "2026-12-05T10:20:30Z+01:00"},
	{"offset UTC", "2026-12-05T10:20:30UTC"},
	{"offset Z twice", "2026-12-05T10:20:30ZZ"},
	{"a comma before the fraction", "2026-12-05T10:20:30,5Z"},
	{"a comma before a long fraction", "2026-12-05T10:20:30,123456789Z"},
	{"a point without digits", "2026-12-05T10:20:30.Z"},
	{"a point without digits, an offset", "2026-12-05T10:20:30.+01:00"},
	{"a fraction with an exponent", "2026-12-05T10:20:30.1e3Z"},
	{"two fractions", "2026-12-05T10:20:30.5.5Z"},
	{"a signed fraction", "2026-12-05T10:20:30.-5Z"},
	{"no seconds", "2026-12-05T10:20Z"},
	{"an hour of one digit", "2026-12-05T1:20:30Z"},
	{"a month of one digit", "2026-1-05T10:20:30Z"},
	{"a date alone", "2026-12-05"},
	{"a date in words", "Dec 5 2026"},
	{"a sign before the year", "+2026-12-05T10:20:30Z"},
	{"a six-digit year", "+002026-12-05T10:20:30Z"},
	{"a five-digit year", "12026-12-05T10:20:30Z"},
	{"a negative year", "-0001-12-05T10:20:30Z"},
	{"a slash in the date", "2026/12/05T10:20:30Z"},
	{"a leading space", " 2026-12-05T10:20:30Z"},
	{"a trailing space", "2026-12-05T10:20:30Z "},
	{"a leading tab", "\t2026-12-05T10:20:30Z"},
	{"a trailing line feed", "2026-12-05T10:20:30Z\n"},
	{"a trailing NUL", "2026-12-05T10:20:30Z\x00"},
	{"a fullwidth digit in the year", "\uff12026-12-05T10:20:30Z"},
	{"a fullwidth digit in the day", "2026-12-0\uff15T10:20:30Z"},
	{"an Arabic-Indic digit in the second", "2026-12-05T10:20:3\u0660Z"},
	{"a Devanagari digit in the fraction", "2026-12-05T10:20:30.\u0967Z"},
	{"a fullwidth digit in the offset", "2026-12-05T10:20:30+01:0\uff10"},
	{"a fullwidth Z", "2026-12-05T10:20:30\uff3a"},
	{"empty", ""},
}

// timeReading is an instant as Unix seconds (floored) and the
// nanoseconds after them (0 to 999,999,999), each a decimal string so
// that every reader keeps it exactly; or Refused.
type timeReading struct {
	Refused     bool   `json:"refused,omitempty"`
	UnixSeconds string `json:"unixSeconds,omitempty"`
	Nanos       string `json:"nanos,omitempty"`
}

func readingOf(t time.Time, ok bool) timeReading {
	if !ok {
		return timeReading{Refused: true}
	}
	return timeReading{UnixSeconds: strconv.FormatInt(t.Unix(), 10), Nanos: strconv.Itoa(t.Nanosecond())}
}

type timeCase struct {
	Name string `json:"name"`
	Time string `json:"time"`
	timeReading
	// KeyWindow is, when it differs from the reading above, what Go makes
	// of the text as a published key's notBefore or notAfter: encoding/json
	// (time.Time's UnmarshalJSON, which is time.Parse(time.RFC3339)) and
	// then PublicKey.Validate, which refuses the year 0000.
	KeyWindow *timeReading `json:"keyWindow,omitempty"`
}

// windowCase is a signing key's window, each edge spelled as the JSON
// text of its value (`"2026-01-01T00:00:00Z"`, `null`, `""`, `5`, `{}`;
// empty: the member left out), and whether Go's VerifyMessageWithKeys
// finds the key valid at a message time (PublicKey.ValidAt, at every
// precision the clients read times). Refused: Go does not decode the key
// at all (PublicKey.UnmarshalJSON reads an edge only as null or an RFC
// 3339 string), so it is valid at no time, and every client holds it so.
type windowCase struct {
	Name      string `json:"name"`
	NotBefore string `json:"notBefore,omitempty"`
	NotAfter  string `json:"notAfter,omitempty"`
	Time      string `json:"time"`
	Valid     bool   `json:"valid"`
	Refused   bool   `json:"refused,omitempty"`
}

// windowRows are key windows at the edges of ValidAt, each edge the JSON
// text of its value. An RFC 3339 edge is spelled as RFC 3339 proper,
// which Go reads alike as a message time and as a key's window; the last
// rows hold edges that are no RFC 3339 string, for which Go decodes no
// key.
var windowRows = []struct{ name, notBefore, notAfter, time string }{
	{"no window", "", "", "2026-01-01T00:00:00Z"},
	{"at notBefore", `"2026-01-01T00:00:00Z"`, "", "2026-01-01T00:00:00Z"},
	{"a nanosecond before notBefore", `"2026-01-01T00:00:00Z"`, "", "2025-12-31T23:59:59.999999999Z"},
	{"at notAfter", "", `"2026-01-01T00:00:00Z"`, "2026-01-01T00:00:00Z"},
	{"a nanosecond before notAfter", "", `"2026-01-01T00:00:00Z"`, "2025-12-31T23:59:59.999999999Z"},
	{"notBefore within a millisecond, before it", `"2026-01-01T00:00:00.0005Z"`, "", "2026-01-01T00:00:00.0003Z"},
	{"notBefore within a millisecond, at it", `"2026-01-01T00:00:00.0005Z"`, "", "2026-01-01T00:00:00.0005Z"},
	{"notBefore within a millisecond, after it", `"2026-01-01T00:00:00.0005Z"`, "", "2026-01-01T00:00:00.0009Z"},
	{"notBefore within a microsecond, before it", `"2026-01-01T00:00:00.0001234Z"`, "", "2026-01-01T00:00:00.0001233Z"},
	{"notBefore within a microsecond, at it", `"2026-01-01T00:00:00.0001234Z"`, "", "2026-01-01T00:00:00.0001234Z"},
	{"notAfter within a millisecond, before it", "", `"2026-01-01T00:00:00.0005Z"`, "2026-01-01T00:00:00.0001Z"},
	{"notAfter within a millisecond, in the millisecond before", "", `"2026-01-01T00:00:00.001Z"`, "2026-01-01T00:00:00.0009Z"},
	{"notAfter on a millisecond, at it", "", `"2026-01-01T00:00:00.001Z"`, "2026-01-01T00:00:00.001Z"},
	{"an offset window", `"2026-01-01T01:00:00+01:00"`, `"2026-01-01T00:00:01-00:00"`, "2026-01-01T00:00:00.5Z"},
	{"a message time at an offset", `"2026-01-01T00:00:00Z"`, "", "2025-12-31T23:30:00-01:00"},
	{"null edges", "null", "null", "2026-01-01T00:00:00Z"},
	// The zero time.Time is Go's "no bound": a notAfter at its instant
	// closes nothing.
	{"notAfter at 0001-01-01T00:00:00Z", "", `"0001-01-01T00:00:00Z"`, "2026-01-01T00:00:00Z"},
	{"notAfter at 0001-01-01T00:00:00Z at an offset", "", `"0001-01-01T01:00:00+01:00"`, "2026-01-01T00:00:00Z"},
	{"notBefore at 0001-01-01T00:00:00Z", `"0001-01-01T00:00:00Z"`, "", "0001-01-01T00:00:00Z"},
	{"notAfter a nanosecond after 0001-01-01T00:00:00Z", "", `"0001-01-01T00:00:00.000000001Z"`, "2026-01-01T00:00:00Z"},
	// An edge that is no RFC 3339 string: Go does not decode the key, so
	// it is valid at no time, whatever the other edge; the empty string
	// is not an absent edge.
	{"notAfter empty, on a key that opened", `"2025-01-01T00:00:00Z"`, `""`, "2026-01-01T00:00:00Z"},
	{"notAfter empty", "", `""`, "2026-01-01T00:00:00Z"},
	{"notBefore empty", `""`, "", "2026-01-01T00:00:00Z"},
	{"notBefore empty, on a key that closes", `""`, `"2027-01-01T00:00:00Z"`, "2026-01-01T00:00:00Z"},
	{"both edges empty", `""`, `""`, "2026-01-01T00:00:00Z"},
	{"notAfter a number of seconds", "", "1798761600", "2026-01-01T00:00:00Z"},
	{"notAfter a number of milliseconds", "", "1798761600000", "2026-01-01T00:00:00Z"},
	{"notBefore zero", "0", "", "2026-01-01T00:00:00Z"},
	{"notBefore a fraction", "1.5", "", "2026-01-01T00:00:00Z"},
	{"notAfter true", "", "true", "2026-01-01T00:00:00Z"},
	{"notBefore false", "false", "", "2026-01-01T00:00:00Z"},
	{"notAfter an object", "", "{}", "2026-01-01T00:00:00Z"},
	{"notBefore an object with a time", `{"time":"2025-01-01T00:00:00Z"}`, "", "2026-01-01T00:00:00Z"},
	{"notAfter a list", "", "[]", "2026-01-01T00:00:00Z"},
	{"notBefore a list of a time", `["2025-01-01T00:00:00Z"]`, "", "2026-01-01T00:00:00Z"},
	{"notAfter empty, notBefore null", "null", `""`, "2026-01-01T00:00:00Z"},
}

type timeVectors struct {
	Note       string       `json:"note"`
	Cases      []timeCase   `json:"cases"`
	WindowNote string       `json:"windowNote"`
	Windows    []windowCase `json:"windows"`
}

// timeKey signs the probes: alice's fixed key.
func timeKey(t *testing.T) keyPair {
	k, _ := fixedKey(t, "alice")
	return k
}

// timeRefused requires err to be code, refusing the message's time.
func timeRefused(t *testing.T, err error, code pigeon.Code, s string) {
	t.Helper()
	var pe *pigeon.Error
	require.True(t, errors.As(err, &pe), "%q: %v", s, err)
	require.Equal(t, code, pe.Code, "%q: %v", s, err)
	require.Contains(t, pe.Message, "time is not an RFC 3339", "%q", s)
}

// goTime is how the broker and the Go client read s, found through the
// exported API alone: SignMessage refuses a time parseRFC3339 refuses
// (ENVELOPE_INVALID), and VerifyMessageWithKeys reads a signed message's
// time with it. For a time it takes, the instant is time.Parse's, and a
// key opening at that instant verifies the signature while one opening a
// nanosecond later does not: parseRFC3339 read that very instant.
func goTime(t *testing.T, k keyPair, s string) (time.Time, bool) {
	m := &pigeon.Message{Subject: "x", ID: "msg_time", Time: s, Data: json.RawMessage(`{}`)}
	open := []pigeon.PublicKey{pigeon.Ed25519PublicKey(k.sigKID, k.sigPub)}
	if s == "" {
		// SignMessage stamps an empty time with now.
		m.Signature = &pigeon.Signature{KID: k.sigKID, Alg: pigeon.AlgEd25519, V: pigeon.SignatureV2}
		timeRefused(t, pigeon.VerifyMessageWithKeys(m, open), pigeon.CodeSignatureInvalid, s)
		return time.Time{}, false
	}
	if err := pigeon.SignMessage(m, k.sigKID, k.sigPriv); err != nil {
		timeRefused(t, err, pigeon.CodeEnvelopeInvalid, s)
		m.Signature = &pigeon.Signature{KID: k.sigKID, Alg: pigeon.AlgEd25519, V: pigeon.SignatureV2}
		timeRefused(t, pigeon.VerifyMessageWithKeys(m, open), pigeon.CodeSignatureInvalid, s)
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err, s)
	from := func(nb time.Time) []pigeon.PublicKey {
		key := open[0]
		key.NotBefore = nb
		return []pigeon.PublicKey{key}
	}
	require.NoError(t, pigeon.VerifyMessageWithKeys(m, open), s)
	require.NoError(t, pigeon.VerifyMessageWithKeys(m, from(at)), "%q: a key opening at %v", s, at)
	require.Error(t, pigeon.VerifyMessageWithKeys(m, from(at.Add(time.Nanosecond))), "%q: a key opening after %v", s, at)
	return at, true
}

// goKeyWindow is what Go makes of s as a published key's notBefore: the
// key decoded by encoding/json and checked by PublicKey.Validate, as the
// broker reads a key published to it.
func goKeyWindow(t *testing.T, k keyPair, s string) (time.Time, bool) {
	edge, err := json.Marshal(s)
	require.NoError(t, err)
	text := `{"kid":"` + k.sigKID + `","use":"sig","alg":"ed25519","key":"` + b64.EncodeToString(k.sigPub) + `","notBefore":` + string(edge) + `}`
	var key pigeon.PublicKey
	if json.Unmarshal([]byte(text), &key) != nil || key.Validate() != nil {
		return time.Time{}, false
	}
	return key.NotBefore, true
}

// goWindow is whether Go finds a key of the window spelled (JSON texts,
// decoded by encoding/json as a published key is) valid at the time of a
// message signed at at, and whether it refuses to decode the key: its
// window then, and nothing else of it, since the key is otherwise sound.
func goWindow(t *testing.T, k keyPair, notBefore, notAfter, at string) (valid, refused bool) {
	text := `{"kid":"` + k.sigKID + `","use":"sig","alg":"ed25519","key":"` + b64.EncodeToString(k.sigPub) + `"`
	if notBefore != "" {
		text += `,"notBefore":` + notBefore
	}
	if notAfter != "" {
		text += `,"notAfter":` + notAfter
	}
	text += "}"
	require.True(t, json.Valid([]byte(text)), "%s", text)
	var key pigeon.PublicKey
	if err := json.Unmarshal([]byte(text), &key); err != nil {
		require.Regexp(t, `^key not(Before|After)\b`, err.Error(), "%s", text)
		// Nor does a list holding it decode: nothing verifies.
		var list []pigeon.PublicKey
		require.Error(t, json.Unmarshal([]byte("["+text+"]"), &list), "%s", text)
		return false, true
	}
	m := &pigeon.Message{Subject: "x", ID: "msg_window", Time: at, Data: json.RawMessage(`{}`)}
	require.NoError(t, pigeon.SignMessage(m, k.sigKID, k.sigPriv))
	err := pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{key})
	if err != nil {
		var pe *pigeon.Error
		require.True(t, errors.As(err, &pe) && pe.Code == pigeon.CodeSignatureInvalid && strings.Contains(pe.Message, "valid at the message time"), "%v", err)
	}
	return err == nil, false
}

func goTimeVectors(t *testing.T) timeVectors {
	k := timeKey(t)
	v := timeVectors{
		Note: "Generated by `go test ./clients/conformance -run TestTimeVectors -update`. Each case is a time as text and how the broker and the Go client read it " +
			"(pigeon's parseRFC3339, then time.Parse(time.RFC3339Nano): a message's time, which the broker's gates check and which chooses the key that verifies a signature): " +
			"refused, or the instant as unixSeconds (floored, so an instant before 1970 has a negative second and nanos counted forward from it) and nanos (0 to 999999999), decimal strings. " +
			"Every client reads every text as Go does; the clients read a signing key's notBefore and notAfter with the same parser, a key whose window does not read being valid at no time. " +
			"keyWindow, where present, is what Go's encoding/json and PublicKey.Validate make of the text as a published key's window, which the broker stores and lists again in its own spelling (time.Time's MarshalJSON): " +
			"a broker never lists a window spelled otherwise than RFC 3339 proper.",
		WindowNote: "Each window is a signing key's notBefore and notAfter, each the JSON text of the member's value (a time with its quotes, null, the empty string as two quotes, 5, {}; absent: the member left out), and whether Go's VerifyMessageWithKeys finds the key valid at the time of a message signed then: " +
			"PublicKey.ValidAt, which holds the window at every precision the clients read times (nanoseconds, microseconds, milliseconds, each truncated), so that notBefore binds to the nanosecond and notAfter to the millisecond; " +
			"null is no bound, and so is an edge at the instant 0001-01-01T00:00:00Z, Go's zero time.Time (a notAfter there closes nothing; the broker never lists one). " +
			"refused: Go does not decode the key, nor a list holding it, because an edge is neither null nor an RFC 3339 string (the empty string, a number, true, an object, a list); every client holds such a key valid at no time, whatever the other edge: nothing verifies with it, nothing is sealed for it, it is never chosen.",
	}
	seen := map[string]bool{}
	for _, c := range timeSpellings {
		require.False(t, seen[c.time], "%q listed twice", c.time)
		seen[c.time] = true
		at, ok := goTime(t, k, c.time)
		tc := timeCase{Name: c.name, Time: c.time, timeReading: readingOf(at, ok)}
		if w := readingOf(goKeyWindow(t, k, c.time)); w != tc.timeReading {
			tc.KeyWindow = &w
		}
		v.Cases = append(v.Cases, tc)
	}
	for _, w := range windowRows {
		require.False(t, seen["window "+w.name], "window %q listed twice", w.name)
		seen["window "+w.name] = true
		valid, refused := goWindow(t, k, w.notBefore, w.notAfter, w.time)
		v.Windows = append(v.Windows, windowCase{Name: w.name, NotBefore: w.notBefore, NotAfter: w.notAfter, Time: w.time, Valid: valid, Refused: refused})
	}
	return v
}

// TestTimeVectors checks vectors/times.json, which the clients' suites
// read, against how Go reads each time now. With -update it writes the
// file first.
func TestTimeVectors(t *testing.T) {
	requireVectors(t, "times.json", "TestTimeVectors", goTimeVectors(t))
}
