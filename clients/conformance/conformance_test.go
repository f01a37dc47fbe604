package conformance

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/policy"
	"pigeon/seal"
)

var update = flag.Bool("update", false, "rewrite vectors/go.json, vectors/canonical.json, vectors/times.json and codes.json")

var b64 = base64.RawURLEncoding

type scenario struct {
	ID      string   `json:"id"`
	API     string   `json:"api"`
	Clients []string `json:"clients"`
	Spec    string   `json:"spec"`
}

func loadScenarios(t *testing.T) []scenario {
	t.Helper()
	b, err := os.ReadFile("scenarios.json")
	require.NoError(t, err)
	var f struct {
		Scenarios []scenario `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(b, &f))
	require.NotEmpty(t, f.Scenarios)
	return f.Scenarios
}

// clientTests is where each client keeps the tests that name scenarios.
// The Go client's are the tests of its package, transport/ws.
var clientTests = map[string]struct {
	dir string
	ext []string
}{
	"go":         {"../../transport/ws", []string{"_test.go"}},
	"typescript": {"../typescript/test", []string{".ts", ".mjs", ".js"}},
	"python":     {"../python/tests", []string{".py"}},
	"rust":       {"../rust/tests", []string{".rs"}},
}

// TestScenariosAreUnique checks the list itself: ids are unique, well
// formed, and name only known clients.
// The catalog the scenarios run against lints clean, warnings included:
// a field the broker ignores (an ackWaitMs outside delivery, say) would
// leave the scenarios testing another policy than the one they describe.
func TestCatalogLintsClean(t *testing.T) {
	problems, err := policy.LintDir("policies")
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestScenariosAreUnique(t *testing.T) {
	id := regexp.MustCompile(`^[a-z0-9_]+\.[a-z0-9_]+$`)
	seen := map[string]bool{}
	for _, s := range loadScenarios(t) {
		require.Regexp(t, id, s.ID)
		require.False(t, seen[s.ID], "scenario %s listed twice", s.ID)
		seen[s.ID] = true
		require.NotEmpty(t, s.Spec, s.ID)
		require.NotEmpty(t, s.Clients, s.ID)
		for _, c := range s.Clients {
			_, ok := clientTests[c]
			require.True(t, ok, "scenario %s names unknown client %q", s.ID, c)
		}
	}
}

// TestEveryClientNamesEveryScenario fails when a client's tests do not name
// a scenario the list asks of it. A test names a scenario by its id in
// quotes (for example `scenario("publish.duplicate", …)`); each client's
// runner also checks at run time that every named scenario ran.
func TestEveryClientNamesEveryScenario(t *testing.T) {
	sources := map[string]string{}
	for name, c := range clientTests {
		var all strings.Builder
		err := filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "target" || d.Name() == ".venv") {
				return filepath.SkipDir
			}
			for _, ext := range c.ext {
				if !d.IsDir() && strings.HasSuffix(p, ext) {
					b, err := os.ReadFile(p)
					if err != nil {
						return err
					}
					all.Write(b)
				}
			}
			return nil
		})
		require.NoError(t, err, "client %s has no tests in %s", name, c.dir)
		sources[name] = all.String()
	}
	for _, s := range loadScenarios(t) {
		for _, c := range s.Clients {
			src := sources[c]
			named := strings.Contains(src, `"`+s.ID+`"`) || strings.Contains(src, `'`+s.ID+`'`)
			require.True(t, named, "client %s has no test for scenario %s", c, s.ID)
		}
	}
}

// The vectors' fixed keys: derived from names, so anyone can recompute
// them, and never used outside tests.
type vectorKey struct {
	SigningKID        string `json:"signingKid"`
	SigningSeed       string `json:"signingSeed"`
	SigningPublic     string `json:"signingPublic"`
	EncryptionKID     string `json:"encryptionKid"`
	EncryptionPrivate string `json:"encryptionPrivate"`
	EncryptionPublic  string `json:"encryptionPublic"`
}

type signedCase struct {
	Name         string          `json:"name"`
	Signer       string          `json:"signer"`
	Message      json.RawMessage `json:"message"`
	SigningInput string          `json:"signingInput"`
}

type sealedCase struct {
	Name      string          `json:"name"`
	Sender    string          `json:"sender"`
	Recipient string          `json:"recipient"`
	Plaintext string          `json:"plaintext"` // base64url
	Sealed    json.RawMessage `json:"sealed"`
}

type sealedDataCase struct {
	Name      string          `json:"name"`
	Sender    string          `json:"sender"`
	Recipient string          `json:"recipient"`
	Clear     json.RawMessage `json:"clear"`
	Payload   string          `json:"payload"` // base64url
	Data      json.RawMessage `json:"data"`
}

type tamperedCase struct {
	Name      string          `json:"name"`
	Kind      string          `json:"kind"` // "signature" or "sealed"
	Signer    string          `json:"signer,omitempty"`
	Sender    string          `json:"sender,omitempty"`
	Recipient string          `json:"recipient,omitempty"`
	Message   json.RawMessage `json:"message,omitempty"`
	Sealed    json.RawMessage `json:"sealed,omitempty"`
}

type vectors struct {
	Note       string               `json:"note,omitempty"`
	Keys       map[string]vectorKey `json:"keys,omitempty"`
	Signed     []signedCase         `json:"signed"`
	Sealed     []sealedCase         `json:"sealed"`
	SealedData []sealedDataCase     `json:"sealedData"`
	Tampered   []tamperedCase       `json:"tampered,omitempty"`
}

type keyPair struct {
	sigPub  ed25519.PublicKey
	sigPriv ed25519.PrivateKey
	sigKID  string
	encPriv []byte
	encPub  []byte
	encKID  string
}

func fixedKey(t *testing.T, name string) (keyPair, vectorKey) {
	seed := sha256.Sum256([]byte("pigeon conformance " + name + " sig"))
	priv := ed25519.NewKeyFromSeed(seed[:])
	encSeed := sha256.Sum256([]byte("pigeon conformance " + name + " enc"))
	ek, err := ecdh.X25519().NewPrivateKey(encSeed[:])
	require.NoError(t, err)
	k := keyPair{
		sigPub: priv.Public().(ed25519.PublicKey), sigPriv: priv,
		encPriv: ek.Bytes(), encPub: ek.PublicKey().Bytes(),
	}
	k.sigKID = seal.KeyID("sig-", k.sigPub)
	k.encKID = seal.KeyID("enc-", k.encPub)
	return k, vectorKey{
		SigningKID: k.sigKID, SigningSeed: b64.EncodeToString(seed[:]), SigningPublic: b64.EncodeToString(k.sigPub),
		EncryptionKID: k.encKID, EncryptionPrivate: b64.EncodeToString(k.encPriv), EncryptionPublic: b64.EncodeToString(k.encPub),
	}
}

func keySet(t *testing.T) (map[string]keyPair, map[string]vectorKey) {
	pairs, pub := map[string]keyPair{}, map[string]vectorKey{}
	for _, n := range []string{"alice", "bob"} {
		pairs[n], pub[n] = fixedKey(t, n)
	}
	return pairs, pub
}

// signedInputs are the messages Go signs for the vectors: each exercises a
// rule of the canonical form (member order by UTF-16 units, number
// spelling, escapes, empty data); envelopeFields adds the other envelope
// fields the second form covers.
var signedInputs = []struct{ name, subject, id, time, data string }{
	{"plain", "chat.messages", "msg_vec_1", "2026-11-29T12:00:00.000Z", `{"kind":"chat","room":"lobby","text":"hello"}`},
	{"member-order", "chat.messages", "msg_vec_2", "2026-11-29T12:00:01Z", `{"zeta":1,"alpha":{"b":2,"a":1},"\ufb33":"x","\ud83d\ude00":"y","Z":[3,2,1]}`},
	{"numbers", "events.telemetry", "msg_vec_3", "2026-11-29T12:00:02.5+01:00", `{"a":1.50,"b":1E30,"c":2e-3,"d":1e-7,"e":1e21,"f":1e20,"g":-0,"h":0.1,"i":123456789}`},
	{"escapes", "events.telemetry", "msg_vec_4", "2026-11-29T12:00:03Z", `{"s":"tab\tnl\nq\"bs\\ctl\u0001 slash/ lt< amp& del\u007f ls\u2028 é 漢 😀"}`},
	{"empty-data", "events.telemetry", "msg_vec_5", "2026-11-29T12:00:04Z", ``},
	{"nested", "chat.messages", "msg_vec_6", "2026-11-29T12:00:05.123456789Z", `{"list":[{"y":true,"x":null},[],{}],"n":{"deep":{"deeper":[false]}}}`},
	{"envelope-fields", "payments.authorize", "msg_vec_7", "2026-11-29T12:00:06Z", `{"amount":"42.50"}`},
}

// envelopeFields fills, for the case of that name, every field the second
// signing form covers besides subject, id, time and data, with escapes.
func envelopeFields(name string, m *pigeon.Message) {
	if name == "envelope-fields" {
		m.Type, m.Intent = "payment.authorization.requested", "authorize_payment"
		m.IdempotencyKey, m.ReplyTo, m.CorrelationID, m.Reason = "k-\u00e9-1", "inbox.checkout", "corr \"7\"", "retry\n<after> 😀"
	}
}

// firstForm signs m in the first form (a signature without v), as clients
// did before the second: such signatures still verify.
func firstForm(t *testing.T, m *pigeon.Message, kid string, priv ed25519.PrivateKey) {
	m.Signature = &pigeon.Signature{KID: kid, Alg: pigeon.AlgEd25519}
	in, err := pigeon.CanonicalSigningInput(m)
	require.NoError(t, err)
	m.Signature.Sig = b64.EncodeToString(ed25519.Sign(priv, in))
}

func generate(t *testing.T) vectors {
	pairs, pub := keySet(t)
	v := vectors{
		Note: "Generated by `go test ./clients/conformance -run TestGoVectors -update`. Keys are fixed test keys derived from names; never use them elsewhere.",
		Keys: pub,
	}
	for _, in := range signedInputs {
		m := &pigeon.Message{Subject: in.subject, ID: in.id, Time: in.time, Type: "vector", Intent: "chat"}
		if in.data != "" {
			m.Data = json.RawMessage(in.data)
		}
		envelopeFields(in.name, m)
		require.NoError(t, pigeon.SignMessage(m, pairs["alice"].sigKID, pairs["alice"].sigPriv))
		input, err := pigeon.CanonicalSigningInput(m)
		require.NoError(t, err)
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		v.Signed = append(v.Signed, signedCase{Name: in.name, Signer: "alice", Message: raw, SigningInput: string(input)})
	}
	{
		m := &pigeon.Message{Subject: "chat.messages", ID: "msg_vec_8", Time: "2026-11-29T12:00:07Z", Type: "vector", Intent: "chat",
			Data: json.RawMessage(`{"form":1}`)}
		firstForm(t, m, pairs["bob"].sigKID, pairs["bob"].sigPriv)
		input, err := pigeon.CanonicalSigningInput(m)
		require.NoError(t, err)
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		v.Signed = append(v.Signed, signedCase{Name: firstFormCase, Signer: "bob", Message: raw, SigningInput: string(input)})
	}
	payloads := []struct {
		name, sender, recipient string
		p                       []byte
	}{
		{"short", "alice", "bob", []byte("hello bob")},
		{"empty", "bob", "alice", []byte{}},
		{"binary-1k", "alice", "bob", bytes.Repeat([]byte{0, 1, 2, 254, 255}, 205)[:1024]},
	}
	for _, p := range payloads {
		s, err := seal.Seal(p.p, pairs[p.recipient].encKID, pairs[p.recipient].encPub, pairs[p.sender].sigKID, pairs[p.sender].sigPriv)
		require.NoError(t, err)
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		v.Sealed = append(v.Sealed, sealedCase{Name: p.name, Sender: p.sender, Recipient: p.recipient, Plaintext: b64.EncodeToString(p.p), Sealed: raw})
	}
	clear := map[string]any{"kind": "chat", "room": "lobby"}
	payload := []byte(`{"text":"meet at noon"}`)
	data, err := seal.SealData(clear, payload, pairs["bob"].encKID, pairs["bob"].encPub, pairs["alice"].sigKID, pairs["alice"].sigPriv)
	require.NoError(t, err)
	cb, _ := json.Marshal(clear)
	v.SealedData = append(v.SealedData, sealedDataCase{Name: "chat", Sender: "alice", Recipient: "bob", Clear: cb, Payload: b64.EncodeToString(payload), Data: data})

	// Tampered: each must be refused.
	var m pigeon.Message
	require.NoError(t, json.Unmarshal(v.Signed[0].Message, &m))
	m.Data = json.RawMessage(`{"kind":"chat","room":"lobby","text":"hellO"}`)
	raw, _ := json.Marshal(&m)
	v.Tampered = append(v.Tampered, tamperedCase{Name: "signed-data-changed", Kind: "signature", Signer: "alice", Message: raw})
	require.NoError(t, json.Unmarshal(v.Signed[0].Message, &m))
	m.Subject = "chat.other"
	raw, _ = json.Marshal(&m)
	v.Tampered = append(v.Tampered, tamperedCase{Name: "signed-subject-changed", Kind: "signature", Signer: "alice", Message: raw})
	// The second form's own fields, and the form itself.
	for _, tc := range []struct {
		name string
		edit func(m *pigeon.Message)
	}{
		{"signed-intent-changed", func(m *pigeon.Message) { m.Intent = "refund_payment" }},
		{"signed-type-changed", func(m *pigeon.Message) { m.Type = "payment.refund.requested" }},
		{"signed-replyTo-changed", func(m *pigeon.Message) { m.ReplyTo = "inbox.elsewhere" }},
		{"signed-idempotencyKey-removed", func(m *pigeon.Message) { m.IdempotencyKey = "" }},
		{"signed-correlationId-changed", func(m *pigeon.Message) { m.CorrelationID = "corr 8" }},
		{"signed-reason-changed", func(m *pigeon.Message) { m.Reason = "" }},
		{"signed-v-removed", func(m *pigeon.Message) { m.Signature.V = 0 }},
		{"signed-v-1", func(m *pigeon.Message) { m.Signature.V = 1 }},
		{"signed-v-3", func(m *pigeon.Message) { m.Signature.V = 3 }},
	} {
		m = pigeon.Message{}
		require.NoError(t, json.Unmarshal(v.Signed[len(signedInputs)-1].Message, &m))
		tc.edit(&m)
		raw, _ = json.Marshal(&m)
		v.Tampered = append(v.Tampered, tamperedCase{Name: tc.name, Kind: "signature", Signer: "alice", Message: raw})
	}
	var s seal.Sealed
	require.NoError(t, json.Unmarshal(v.Sealed[0].Sealed, &s))
	ct, _ := b64.DecodeString(s.Ciphertext)
	ct[0] ^= 1
	s.Ciphertext = b64.EncodeToString(ct)
	raw, _ = json.Marshal(&s)
	v.Tampered = append(v.Tampered, tamperedCase{Name: "sealed-ciphertext-flipped", Kind: "sealed", Sender: "alice", Recipient: "bob", Sealed: raw})
	require.NoError(t, json.Unmarshal(v.Sealed[0].Sealed, &s))
	s.SenderKID = pairs["bob"].sigKID
	raw, _ = json.Marshal(&s)
	v.Tampered = append(v.Tampered, tamperedCase{Name: "sealed-sender-kid-swapped", Kind: "sealed", Sender: "alice", Recipient: "bob", Sealed: raw})
	return v
}

// checkVectors opens and verifies every case of v with the fixed keys, the
// way a recipient in Go would: what any client signed or sealed must pass.
func checkVectors(t *testing.T, name string, v vectors) {
	pairs, _ := keySet(t)
	require.NotEmpty(t, v.Signed, "%s: no signed cases", name)
	require.NotEmpty(t, v.Sealed, "%s: no sealed cases", name)
	require.NotEmpty(t, v.SealedData, "%s: no sealedData cases", name)
	for _, c := range v.Signed {
		var m pigeon.Message
		require.NoError(t, json.Unmarshal(c.Message, &m), "%s/%s", name, c.Name)
		input, err := pigeon.CanonicalSigningInput(&m)
		require.NoError(t, err, "%s/%s", name, c.Name)
		require.Equal(t, c.SigningInput, string(input), "%s/%s: signing input", name, c.Name)
		require.NoError(t, pigeon.VerifyMessage(&m, pairs[c.Signer].sigPub), "%s/%s", name, c.Name)
		require.Equal(t, pairs[c.Signer].sigKID, m.Signature.KID, "%s/%s", name, c.Name)
		if c.Name != firstFormCase {
			require.Equal(t, pigeon.SignatureV2, m.Signature.V, "%s/%s: signed in the second form (v 2)", name, c.Name)
		}
	}
	for _, c := range v.Sealed {
		var s seal.Sealed
		require.NoError(t, json.Unmarshal(c.Sealed, &s), "%s/%s", name, c.Name)
		got, err := seal.Open(&s, pairs[c.Recipient].encPriv, pairs[c.Sender].sigPub)
		require.NoError(t, err, "%s/%s", name, c.Name)
		want, err := b64.DecodeString(c.Plaintext)
		require.NoError(t, err)
		require.Equal(t, want, append([]byte{}, got...), "%s/%s", name, c.Name)
	}
	for _, c := range v.SealedData {
		clear, payload, err := seal.OpenData(c.Data, pairs[c.Recipient].encPriv, pairs[c.Sender].sigPub)
		require.NoError(t, err, "%s/%s", name, c.Name)
		want, _ := b64.DecodeString(c.Payload)
		require.Equal(t, want, append([]byte{}, payload...), "%s/%s", name, c.Name)
		var wantClear map[string]any
		require.NoError(t, json.Unmarshal(c.Clear, &wantClear))
		require.Equal(t, wantClear, clear, "%s/%s", name, c.Name)
	}
	for _, c := range v.Tampered {
		switch c.Kind {
		case "signature":
			var m pigeon.Message
			require.NoError(t, json.Unmarshal(c.Message, &m))
			require.Error(t, pigeon.VerifyMessage(&m, pairs[c.Signer].sigPub), "%s/%s", name, c.Name)
		case "sealed":
			var s seal.Sealed
			require.NoError(t, json.Unmarshal(c.Sealed, &s))
			_, err := seal.Open(&s, pairs[c.Recipient].encPriv, pairs[c.Sender].sigPub)
			require.Error(t, err, "%s/%s", name, c.Name)
		default:
			t.Fatalf("%s/%s: unknown kind %q", name, c.Name, c.Kind)
		}
	}
}

// firstFormCase names the signed case made in the first form, which every
// client verifies too.
const firstFormCase = "first-form"

func readVectors(t *testing.T, path string) vectors {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var v vectors
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), path)
	return v
}

// TestGoVectors checks vectors/go.json, which the clients read: its keys
// are the fixed ones and every case verifies and opens. With -update it
// writes a fresh file first (new seals: sealing is randomized).
func TestGoVectors(t *testing.T) {
	path := filepath.Join("vectors", "go.json")
	if *update {
		b, err := json.MarshalIndent(generate(t), "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	}
	v := readVectors(t, path)
	_, pub := keySet(t)
	require.Equal(t, pub, v.Keys, "go.json keys differ from the fixed keys")
	require.Len(t, v.Signed, len(signedInputs)+1)
	require.Len(t, v.Tampered, 13)
	checkVectors(t, "go", v)
}

// TestClientVectors opens and verifies what each client signed and sealed
// (vectors/<client>.json, made by the client's own test and checked in).
func TestClientVectors(t *testing.T) {
	for _, c := range []string{"typescript", "python", "rust"} {
		t.Run(c, func(t *testing.T) {
			checkVectors(t, c, readVectors(t, filepath.Join("vectors", c+".json")))
		})
	}
}
