package pigeon

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"pigeon/internal/jsontext"
	"pigeon/seal"
)

// Signature algorithms and key uses.
const (
	// AlgEd25519 is the only signature algorithm: Ed25519 (RFC 8032), as
	// crypto/ed25519 implements it.
	AlgEd25519 = "ed25519"
	// AlgX25519 is the key agreement algorithm of encryption keys.
	AlgX25519 = "x25519"
	// UseSig marks a key that verifies signatures.
	UseSig = "sig"
	// UseEnc marks a key that payloads are sealed for.
	UseEnc = "enc"
)

// SigningContext is the first element of the first signing form's input
// (a signature without "v"). It names the format version, so that a
// signature made for Pigeon messages cannot be taken for a signature over
// anything else.
const SigningContext = "pigeon-sig-v1"

// SigningContextV2 is the first element of the second form's input (a
// signature with "v": 2), the form SignMessage makes.
const SigningContextV2 = "pigeon-sig-v2"

// SignatureV2 is Signature.V of a signature in the second form, which
// also covers type, intent, idempotencyKey, replyTo, correlationId and
// reason. A signature without V (0) is in the first form.
const SignatureV2 = 2

// keyEncoding is how keys and signatures travel: base64url without padding.
// Strict rejects non-zero trailing bits, so each value has one encoding.
var keyEncoding = base64.RawURLEncoding.Strict()

// CanonicalSigningInput returns the bytes a sender signs for m in the form
// m's signature names, or, for an unsigned m, in the form SignMessage
// makes (the second): the RFC 8785 (JCS) canonical JSON of the array
//
//	["pigeon-sig-v2", subject, id, time, type, intent, idempotencyKey, replyTo, correlationId, reason, data]
//
// for a signature with "v": 2, and of
//
//	["pigeon-sig-v1", subject, id, time, data]
//
// for one without "v", the first form, which leaves every envelope field
// but subject, id, time and data uncovered. The strings are the envelope's
// exactly as they are (no normalisation; an absent field is ""), and data
// is the message data, canonicalised by JCS too; empty data counts as {}
// as the broker stores it. The result holds no whitespace, so two parties
// that agree on those values build the same bytes whatever the JSON text
// they exchanged. Neither form covers source, specversion, classification
// and region, which the broker fills when a publisher leaves them empty,
// nor the fields the broker sets on acceptance. It fails with
// ENVELOPE_INVALID when subject, id or time is empty, when a covered
// string is not valid UTF-8, when the signature names another form, or
// when data cannot be canonicalised, which includes data with a number the
// canonical form would round (an integer beyond 2^53 such as
// 9007199254740993, more digits than a double keeps, 1e-400): such a
// number travels as a string.
func CanonicalSigningInput(m *Message) ([]byte, error) {
	return appendSigningInput(nil, m)
}

func appendSigningInput(b []byte, m *Message) ([]byte, error) {
	if m == nil {
		return nil, NewError(CodeEnvelopeInvalid, "message is required")
	}
	v := SignatureV2
	if m.Signature != nil {
		v = m.Signature.V
	}
	if v != 0 && v != SignatureV2 {
		return nil, NewError(CodeEnvelopeInvalid, "signature.v must be absent or %d", SignatureV2)
	}
	for _, f := range [...]struct{ name, v string }{{"subject", m.Subject}, {"id", m.ID}, {"time", m.Time}} {
		if f.v == "" {
			return nil, NewError(CodeEnvelopeInvalid, "%s is required for a signature", f.name)
		}
		if !utf8.ValidString(f.v) {
			return nil, NewError(CodeEnvelopeInvalid, "%s is not valid UTF-8", f.name)
		}
	}
	if v == 0 {
		b = append(b, `["`+SigningContext+`",`...)
	} else {
		b = append(b, `["`+SigningContextV2+`",`...)
	}
	b = jsontext.AppendCanonicalString(b, m.Subject)
	b = append(b, ',')
	b = jsontext.AppendCanonicalString(b, m.ID)
	b = append(b, ',')
	b = jsontext.AppendCanonicalString(b, m.Time)
	b = append(b, ',')
	if v == SignatureV2 {
		for _, f := range [...]struct{ name, v string }{{"type", m.Type}, {"intent", m.Intent}, {"idempotencyKey", m.IdempotencyKey},
			{"replyTo", m.ReplyTo}, {"correlationId", m.CorrelationID}, {"reason", m.Reason}} {
			if !utf8.ValidString(f.v) {
				return nil, NewError(CodeEnvelopeInvalid, "%s is not valid UTF-8", f.name)
			}
			b = jsontext.AppendCanonicalString(b, f.v)
			b = append(b, ',')
		}
	}
	if len(m.Data) == 0 {
		b = append(b, "{}"...)
	} else {
		var err error
		if b, err = jsontext.AppendCanonical(b, m.Data); err != nil {
			return nil, WrapError(CodeEnvelopeInvalid, err, "data has no canonical form: %s", err.(*jsontext.CanonicalError).Detail())
		}
		if at := inexactNumber(m.Data); at >= 0 {
			return nil, NewError(CodeEnvelopeInvalid, "data has no exact canonical form: the number at offset %d has more precision than a double keeps; send it as a string", at)
		}
	}
	return append(b, ']'), nil
}

// inexactNumber returns the offset in data (valid JSON) of the first number
// whose value the canonical form changes, or -1. JCS writes every number as
// the shortest decimal of the nearest double, so integers beyond 2^53,
// decimals with more digits than a double keeps, and numbers that underflow
// to 0 lose part of their value: two data that differ there would have one
// signing input, and a signature over it would verify for both while a
// receiver that reads numbers exactly (an int64 id, an amount in minor
// units, a decimal) acts on either. Such data is not signed and its
// signatures do not verify; a value that needs the precision travels as a
// string. Spellings of one value (1.0 and 1, 1e2 and 100) are not affected.
func inexactNumber(data []byte) int {
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			end, _ := jsontext.NumberEnd(data, i)
			if !exactNumber(data[i:end]) {
				return i
			}
			i = end - 1
		}
	}
	return -1
}

// exactNumber reports whether the JSON number lit is exactly the decimal
// that JCS writes for it: the shortest decimal that rounds to the double
// nearest lit.
func exactNumber(lit []byte) bool {
	var buf [24]byte
	neg, digits, exp := parseDecimal(lit, buf[:0])
	if len(digits) == 0 {
		return true // zero, whatever its sign and exponent
	}
	// Up to 15 significant digits (DBL_DIG) in the range of normal doubles
	// survive the round trip through a double.
	if top := exp + len(digits) - 1; len(digits) <= 15 && top >= -307 && top <= 307 {
		return true
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return false
	}
	var sbuf, dbuf [32]byte
	short := strconv.AppendFloat(sbuf[:0], f, 'e', -1, 64)
	sneg, sdigits, sexp := parseDecimal(short, dbuf[:0])
	return sneg == neg && sexp == exp && string(sdigits) == string(digits)
}

// parseDecimal splits the JSON number lit into its sign and its value as
// digits × 10^exp, digits without leading or trailing zeros (none for
// zero), appended to buf. Exponents beyond ±1e9 saturate, which keeps them
// distinct from any double's.
func parseDecimal(lit, buf []byte) (neg bool, digits []byte, exp int) {
	i := 0
	if i < len(lit) && lit[i] == '-' {
		neg = true
		i++
	}
	frac, dot := 0, false
	for ; i < len(lit) && lit[i] != 'e' && lit[i] != 'E'; i++ {
		switch c := lit[i]; {
		case c == '.':
			dot = true
		case c == '0' && len(buf) == 0:
			if dot {
				frac++
			}
		default:
			buf = append(buf, c)
			if dot {
				frac++
			}
		}
	}
	if i < len(lit) { // exponent
		i++
		eneg := false
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			eneg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			if exp < 1e9 {
				exp = exp*10 + int(lit[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	exp -= frac
	for len(buf) > 0 && buf[len(buf)-1] == '0' {
		buf = buf[:len(buf)-1]
		exp++
	}
	if len(buf) == 0 {
		return neg, buf, 0
	}
	return neg, buf, exp
}

// signingBufs holds buffers for signing inputs.
var signingBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBytes bounds the buffers signingBufs keeps for reuse.
const maxPooledBytes = 64 << 10

func putSigningBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBytes {
		*bp = (*bp)[:0]
		signingBufs.Put(bp)
	}
}

// SignMessage signs m with priv and sets m.Signature to {kid, "ed25519",
// base64url signature, v: 2}: the second signing form (see
// CanonicalSigningInput). The id and time are part of what is signed, so an
// empty ID is first set to a fresh "msg_" id and an empty Time to the
// current time (RFC 3339, milliseconds, UTC); the broker keeps both as
// given. m is not modified when SignMessage fails: INVALID_ARGUMENT for a
// bad key or kid, ENVELOPE_INVALID for a time that is not RFC 3339 or data
// without a canonical form.
//
// Any change to subject, id, time, type, intent, idempotencyKey, replyTo,
// correlationId, reason or the meaning of data after signing makes the
// signature fail; a change of data's formatting (whitespace, key order,
// escapes, number spelling) does not.
func SignMessage(m *Message, kid string, priv ed25519.PrivateKey) error {
	if m == nil {
		return NewError(CodeInvalidArgument, "message is required")
	}
	if len(priv) != ed25519.PrivateKeySize {
		return NewError(CodeInvalidArgument, "signing key is not an Ed25519 private key")
	}
	if err := checkKID(kid); err != nil {
		return err
	}
	c := *m
	c.Signature = &Signature{V: SignatureV2}
	if c.ID == "" {
		c.ID = NewMessageID()
	}
	if c.Time == "" {
		c.Time = formatTime(time.Now())
	} else if _, ok := parseRFC3339(c.Time); !ok {
		return NewError(CodeEnvelopeInvalid, "time is not an RFC 3339 timestamp")
	}
	bp := signingBufs.Get().(*[]byte)
	defer putSigningBuf(bp)
	in, err := appendSigningInput((*bp)[:0], &c)
	if err != nil {
		return err
	}
	*bp = in
	m.ID, m.Time = c.ID, c.Time
	m.Signature = &Signature{KID: kid, Alg: AlgEd25519, Sig: keyEncoding.EncodeToString(ed25519.Sign(priv, in)), V: SignatureV2}
	return nil
}

// VerifyMessage checks m's signature against pub. It returns nil when the
// signature is an Ed25519 signature by pub over CanonicalSigningInput(m),
// in the form the signature names (v 2, or absent for the first form);
// SIGNATURE_REQUIRED when m carries no signature; SIGNATURE_INVALID when v
// is neither absent nor 2, the algorithm is not "ed25519", the signature does not decode, pub is not an
// Ed25519 public key or is one of small order (seal.WeakSigningKey), the
// signature's R is of small order (which libsodium and ed25519-dalek's
// verify_strict refuse), the message has no canonical form, or the
// signature does not verify. It does not look at the kid: choosing the key
// is the caller's (see SelectKey and VerifyMessageWithKeys).
func VerifyMessage(m *Message, pub ed25519.PublicKey) error {
	if m == nil || m.Signature == nil {
		return NewError(CodeSignatureRequired, "message is not signed")
	}
	s := m.Signature
	if s.V != 0 && s.V != SignatureV2 {
		return NewError(CodeSignatureInvalid, "signature.v must be absent or %d", SignatureV2)
	}
	if s.Alg != AlgEd25519 {
		return NewError(CodeSignatureInvalid, "signature algorithm must be %q", AlgEd25519)
	}
	var sig [ed25519.SignatureSize]byte
	if keyEncoding.EncodedLen(len(sig)) != len(s.Sig) {
		return NewError(CodeSignatureInvalid, "signature is not a base64url Ed25519 signature")
	}
	if n, err := keyEncoding.Decode(sig[:], []byte(s.Sig)); err != nil || n != len(sig) {
		return NewError(CodeSignatureInvalid, "signature is not a base64url Ed25519 signature")
	}
	if len(pub) != ed25519.PublicKeySize {
		return NewError(CodeSignatureInvalid, "verification key is not an Ed25519 public key")
	}
	if seal.WeakSigningKey(pub) {
		// Under a point of small order some fixed bytes verify as a
		// signature of many or all messages: the key proves nothing.
		return NewError(CodeSignatureInvalid, "verification key is an Ed25519 point of small order")
	}
	if seal.WeakSigningKey(sig[:32]) {
		// R, the signer's nonce point, of small order: crypto/ed25519 takes
		// it, libsodium (the Python client) and ed25519-dalek's
		// verify_strict (the Rust client) do not, so receivers would refuse
		// what the gate admitted. No honest signer makes one.
		return NewError(CodeSignatureInvalid, "signature does not verify")
	}
	bp := signingBufs.Get().(*[]byte)
	defer putSigningBuf(bp)
	in, err := appendSigningInput((*bp)[:0], m)
	if err != nil {
		return WrapError(CodeSignatureInvalid, err, "message has no canonical signing form")
	}
	*bp = in
	if !ed25519.Verify(pub, in, sig[:]) {
		return NewError(CodeSignatureInvalid, "signature does not verify")
	}
	return nil
}

// VerifyMessageWithKeys verifies m against the sender's published keys: it
// selects the signing key named by m.Signature.KID that is valid at the
// message time (SelectKey) and calls VerifyMessage. SIGNATURE_REQUIRED when
// m is unsigned; SIGNATURE_INVALID when the time is not RFC 3339, no
// published key matches, or the signature does not verify.
func VerifyMessageWithKeys(m *Message, keys []PublicKey) error {
	if m == nil || m.Signature == nil {
		return NewError(CodeSignatureRequired, "message is not signed")
	}
	at, ok := parseRFC3339(m.Time)
	if !ok {
		return NewError(CodeSignatureInvalid, "message time is not an RFC 3339 timestamp")
	}
	if m.Signature.KID == "" {
		return NewError(CodeSignatureInvalid, "signature has no kid")
	}
	k, ok := SelectKey(keys, m.Signature.KID, UseSig, at)
	if !ok {
		return NewError(CodeSignatureInvalid, "no signing key %q valid at the message time", m.Signature.KID)
	}
	pub, err := k.Ed25519()
	if err != nil {
		return WrapError(CodeSignatureInvalid, err, "signing key %q is unusable", k.KID)
	}
	return VerifyMessage(m, pub)
}

// parseRFC3339 parses a message's time, which receivers read and which,
// for a signed message, chooses the key that verifies it.
// time.Parse(time.RFC3339Nano) alone also takes what RFC 3339 does not
// and the other clients refuse: a comma before the fraction, an offset
// minute of 60 to 99, an offset of 24 hours (Node's Date.parse gives NaN
// for each). A time the broker accepted (or a signature it verified with
// it) would then fail at receivers in other languages, so the syntax is
// checked first: "YYYY-MM-DDTHH:MM:SS", an optional "." and digits, then
// "Z" or "+HH:MM"/"-HH:MM" with the hour below 24 and the minute below 60.
// The year 0000, which RFC 3339 and Go take, is refused too: the Python
// client's datetime starts at year 1.
func parseRFC3339(s string) (time.Time, bool) {
	n := len(s)
	if n < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[:4] == "0000" {
		return time.Time{}, false
	}
	i := 19
	if s[i] == '.' {
		for i++; i < n && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		if i == 20 {
			return time.Time{}, false
		}
	}
	if !rfc3339Offset(s[i:]) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// rfc3339Offset reports whether z is "Z" or "+HH:MM"/"-HH:MM" with HH
// 00-23 and MM 00-59.
func rfc3339Offset(z string) bool {
	if z == "Z" {
		return true
	}
	if len(z) != 6 || (z[0] != '+' && z[0] != '-') || z[3] != ':' {
		return false
	}
	for _, i := range [...]int{1, 2, 4, 5} {
		if z[i] < '0' || z[i] > '9' {
			return false
		}
	}
	return (z[1] < '2' || z[1] == '2' && z[2] < '4') && z[4] < '6'
}

// PublicKey is a public key an account publishes: an Ed25519 key to verify
// its signatures (use "sig") or an X25519 key to seal payloads for it (use
// "enc"). A key is valid from NotBefore (inclusive; zero means always) until
// NotAfter (exclusive; zero means open). Rotation publishes a new key under a
// new kid and closes the old key's window, keeping the old key listed so that
// messages signed within its window still verify; a compromised key is
// removed instead.
type PublicKey struct {
	KID       string    `json:"kid"`
	Use       string    `json:"use"`
	Alg       string    `json:"alg"`
	Key       string    `json:"key"`
	NotBefore time.Time `json:"notBefore,omitzero"`
	NotAfter  time.Time `json:"notAfter,omitzero"`
}

// UnmarshalJSON reads a published key, its notBefore and notAfter as
// every Pigeon reader reads a time (parseRFC3339: RFC 3339 proper, to the
// nanosecond; null or absent is no bound). encoding/json alone would take
// a window the other clients read as no time at all (an offset of 24
// hours or 60 minutes, a comma before the fraction, a one-digit hour), so
// that a key listed by a server would verify a message in Go and in no
// other client.
func (k *PublicKey) UnmarshalJSON(b []byte) error {
	type plain PublicKey
	var v struct {
		*plain
		NotBefore json.RawMessage `json:"notBefore"`
		NotAfter  json.RawMessage `json:"notAfter"`
	}
	var out PublicKey
	v.plain = (*plain)(&out)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if err := timeMember("key notBefore", v.NotBefore, &out.NotBefore); err != nil {
		return err
	}
	if err := timeMember("key notAfter", v.NotAfter, &out.NotAfter); err != nil {
		return err
	}
	*k = out
	return nil
}

// timeMember reads raw, the JSON value of the time member name, into to
// as every Pigeon reader reads a time (parseRFC3339); absent or null
// leaves to as it is, as encoding/json leaves a time.Time.
func timeMember(name string, raw json.RawMessage, to *time.Time) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	t, ok := parseRFC3339(text)
	if !ok {
		return fmt.Errorf("%s %q is not an RFC 3339 time", name, text)
	}
	*to = t
	return nil
}

// Ed25519PublicKey returns pub as a published signing key named kid, valid
// at all times.
func Ed25519PublicKey(kid string, pub ed25519.PublicKey) PublicKey {
	return PublicKey{KID: kid, Use: UseSig, Alg: AlgEd25519, Key: keyEncoding.EncodeToString(pub)}
}

// X25519PublicKey returns the raw 32-byte X25519 key pub as a published
// encryption key named kid, valid at all times.
func X25519PublicKey(kid string, pub []byte) PublicKey {
	return PublicKey{KID: kid, Use: UseEnc, Alg: AlgX25519, Key: keyEncoding.EncodeToString(pub)}
}

// clientPrecisions are the precisions at which the clients read times:
// Go to the nanosecond, Python to the microsecond, TypeScript and Rust to
// the millisecond, each truncating.
var clientPrecisions = [...]time.Duration{time.Nanosecond, time.Microsecond, time.Millisecond}

// ValidAt reports whether t lies in the key's window [NotBefore, NotAfter)
// read at every precision the clients read times (nanoseconds,
// microseconds, milliseconds, each truncated). A window closed within a
// millisecond (NotAfter ...00.0005Z) does not hold ...00.0001Z: a client
// that reads milliseconds finds the key closed then, and would refuse a
// signature that the broker verified with it.
func (k PublicKey) ValidAt(t time.Time) bool {
	for _, d := range clientPrecisions {
		at := t.Truncate(d)
		if !k.NotBefore.IsZero() && at.Before(k.NotBefore.Truncate(d)) {
			return false
		}
		if !k.NotAfter.IsZero() && !at.Before(k.NotAfter.Truncate(d)) {
			return false
		}
	}
	return true
}

// Ed25519 decodes a signing key. It fails with INVALID_ARGUMENT unless the
// key's alg is "ed25519" and Key is the base64url of 32 bytes.
func (k PublicKey) Ed25519() (ed25519.PublicKey, error) {
	if k.Alg != AlgEd25519 {
		return nil, NewError(CodeInvalidArgument, "key %q is not an %s key", k.KID, AlgEd25519)
	}
	b, err := decodeKey(k)
	return ed25519.PublicKey(b), err
}

// X25519 decodes an encryption key to its raw 32 bytes. It fails with
// INVALID_ARGUMENT unless the key's alg is "x25519" and Key is the base64url
// of 32 bytes.
func (k PublicKey) X25519() ([]byte, error) {
	if k.Alg != AlgX25519 {
		return nil, NewError(CodeInvalidArgument, "key %q is not an %s key", k.KID, AlgX25519)
	}
	return decodeKey(k)
}

// decodeKey decodes k.Key, which must be the one spelling of 32 bytes:
// 43 base64url characters. encoding/base64 skips CR and LF even in strict
// mode, and a key with two spellings would have two owners (a key's owner
// is found by its text; see directory.claimKeys).
func decodeKey(k PublicKey) ([]byte, error) {
	b, err := keyEncoding.DecodeString(k.Key)
	if err != nil || len(b) != 32 || len(k.Key) != keyEncoding.EncodedLen(32) {
		return nil, NewError(CodeInvalidArgument, "key %q is not the base64url of a 32-byte key", k.KID)
	}
	return b, nil
}

// Validate checks a key before it is published: a kid of 1 to 128
// printable ASCII characters, use "sig" with alg "ed25519" or use "enc" with
// alg "x25519", a key that decodes and is not weak (an Ed25519 key of small
// order, which anyone can sign with; an X25519 key of low order or not in
// canonical form, which nothing can be sealed for: see seal.WeakSigningKey
// and seal.WeakEncryptionKey), NotBefore and NotAfter in the years 0001
// to 9999, and NotAfter after NotBefore when both are set. Errors are
// INVALID_ARGUMENT.
func (k PublicKey) Validate() error {
	if err := checkKID(k.KID); err != nil {
		return err
	}
	switch {
	case k.Use == UseSig && k.Alg == AlgEd25519, k.Use == UseEnc && k.Alg == AlgX25519:
	case k.Use != UseSig && k.Use != UseEnc:
		return NewError(CodeInvalidArgument, "key %q: use must be %q or %q", k.KID, UseSig, UseEnc)
	default:
		return NewError(CodeInvalidArgument, "key %q: use %q requires alg %q", k.KID, k.Use, map[string]string{UseSig: AlgEd25519, UseEnc: AlgX25519}[k.Use])
	}
	b, err := decodeKey(k)
	if err != nil {
		return err
	}
	if k.Use == UseSig && seal.WeakSigningKey(b) {
		return NewError(CodeInvalidArgument, "key %q is an Ed25519 point of small order, under which anyone can sign", k.KID)
	}
	if k.Use == UseEnc && seal.WeakEncryptionKey(b) {
		return NewError(CodeInvalidArgument, "key %q is an X25519 key of low order or not in canonical form, for which nothing can be sealed", k.KID)
	}
	for _, w := range [...]time.Time{k.NotBefore, k.NotAfter} {
		// Year 0000 is RFC 3339 and Go's but not the Python client's
		// (its dates start at year 1), which would find the key never
		// valid where the broker finds it valid; JSON writes no year
		// beyond 9999.
		if !w.IsZero() && (w.Year() < 1 || w.Year() > 9999) {
			return NewError(CodeInvalidArgument, "key %q: notBefore and notAfter must lie in the years 0001 to 9999", k.KID)
		}
	}
	if !k.NotBefore.IsZero() && !k.NotAfter.IsZero() && !k.NotAfter.After(k.NotBefore) {
		return NewError(CodeInvalidArgument, "key %q: notAfter must be after notBefore", k.KID)
	}
	return nil
}

// MaxAccountKeys is the most public keys an account publishes at once.
// The account itself replaces its list, so without a bound it could make
// the broker keep, check and scan (on every verification) as many keys as
// a request body holds. Rotation keeps a closed key listed only while
// signatures made with it still need verifying.
const MaxAccountKeys = 64

// ValidateKeys validates each key and checks that no kid appears twice
// and that there are at most MaxAccountKeys.
func ValidateKeys(keys []PublicKey) error {
	if len(keys) > MaxAccountKeys {
		return NewError(CodeInvalidArgument, "an account publishes at most %d keys (got %d)", MaxAccountKeys, len(keys))
	}
	for i, k := range keys {
		if err := k.Validate(); err != nil {
			return err
		}
		for _, o := range keys[:i] {
			if o.KID == k.KID {
				return NewError(CodeInvalidArgument, "kid %q appears twice", k.KID)
			}
		}
	}
	return nil
}

func checkKID(kid string) error {
	if kid == "" || len(kid) > 128 {
		return NewError(CodeInvalidArgument, "kid must be 1 to 128 characters")
	}
	for i := 0; i < len(kid); i++ {
		if kid[i] <= ' ' || kid[i] > '~' {
			return NewError(CodeInvalidArgument, "kid must be printable ASCII without spaces")
		}
	}
	return nil
}

// SelectKey picks the key for use ("sig" or "enc"; empty matches any) valid
// at time at. With a kid it returns the first key of that kid, which is how a
// verifier finds the key a signature names, old or new. Without a kid it
// returns the valid key with the latest NotBefore (the last listed among
// equals), which is how a sender picks the current encryption key of a
// recipient. A key PublicKey.Validate refuses (one a server never lists:
// an empty kid, a key that is not 32 bytes, a weak key) is passed over, so
// a sound key listed beside it is chosen. ok is false when no key qualifies.
func SelectKey(keys []PublicKey, kid, use string, at time.Time) (PublicKey, bool) {
	best := -1
	for i, k := range keys {
		if (use != "" && k.Use != use) || (kid != "" && k.KID != kid) || !k.ValidAt(at) || k.Validate() != nil {
			continue
		}
		if kid != "" {
			return k, true
		}
		if best < 0 || !k.NotBefore.Before(keys[best].NotBefore) {
			best = i
		}
	}
	if best < 0 {
		return PublicKey{}, false
	}
	return keys[best], true
}
