package pigeon

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

// acceptedJSONCase is one message of FuzzAcceptedJSON: the accepted
// message, and the stored envelope (another message's when the ids or
// the depth differ) its encoding is made from.
type acceptedJSONCase struct {
	text                                   [10]string // id, type, source, subject, time, intent, key, classification, region, reason
	data                                   string
	replyTo, correlationID                 string
	sigKID, sigAlg, sig                    string
	sigV                                   int
	signed                                 bool
	contractID, subjectID, schemaID        string
	storedContract, storedSubj, storedSchm string
	hops, storedHops                       uint32
	seq                                    uint64
	acceptedAt                             string
}

func (c *acceptedJSONCase) messages() (accepted, stored Message) {
	m := Message{SpecVersion: SpecVersion, ID: c.text[0], Type: c.text[1], Source: c.text[2], Subject: c.text[3], Time: c.text[4],
		Intent: c.text[5], IdempotencyKey: c.text[6], Classification: c.text[7], Region: c.text[8], Reason: c.text[9],
		ReplyTo: c.replyTo, CorrelationID: c.correlationID, ContractID: c.contractID, SubjectID: c.subjectID, SchemaID: c.schemaID, Hops: c.hops}
	// Data is valid JSON in every envelope the broker stores: text that
	// is not goes in as a JSON string of it.
	switch {
	case c.data == "":
	case json.Valid([]byte(c.data)):
		m.Data = json.RawMessage(c.data)
	default:
		m.Data = jsontext.AppendString(nil, c.data)
	}
	if c.signed {
		m.Signature = &Signature{KID: c.sigKID, Alg: c.sigAlg, Sig: c.sig, V: c.sigV}
	}
	stored = m
	stored.ContractID, stored.SubjectID, stored.SchemaID, stored.Hops = c.storedContract, c.storedSubj, c.storedSchm, c.storedHops
	accepted = m
	accepted.Sequence, accepted.AcceptedAt = c.seq, c.acceptedAt
	return accepted, stored
}

// checkAcceptedJSON: made from a stored envelope, the encoding is nil or
// byte for byte what AppendJSON writes for the accepted message, and it
// is made (not nil) whenever the stored envelope is the message's own.
func checkAcceptedJSON(t *testing.T, c *acceptedJSONCase) {
	accepted, stored := c.messages()
	body := stored.AppendJSON(nil)
	got := acceptedJSON(body, &accepted)
	want := accepted.AppendJSON(nil)
	if got != nil {
		require.Equal(t, string(want), string(got), "stored %s", body)
	}
	own := stored.ContractID == accepted.ContractID && stored.SubjectID == accepted.SubjectID &&
		stored.SchemaID == accepted.SchemaID && stored.Hops == accepted.Hops
	if own && accepted.Sequence != 0 && accepted.AcceptedAt != "" {
		require.NotNil(t, got, "the message's own stored envelope %s", body)
	}
}

// TestAcceptedJSONRefusesAnotherEnvelope: a stored envelope whose ids or
// depth are not the message's is never spliced into another message's
// encoding, whichever ids either lacks.
func TestAcceptedJSONRefusesAnotherEnvelope(t *testing.T) {
	base := acceptedJSONCase{
		text: [10]string{"msg_1", "payment", "spiffe://p", "payments.events", "2026-12-06T08:00:00.000Z", "authorize", "", "pci", "uk", ""},
		data: `{"amount":1}`, seq: 7, acceptedAt: "2026-12-06T08:00:00.001Z",
		contractID: "ctr_1", subjectID: "payments.events", schemaID: "payment.v1",
		storedContract: "ctr_1", storedSubj: "payments.events", storedSchm: "payment.v1",
	}
	for _, tc := range []struct {
		name   string
		change func(c *acceptedJSONCase)
	}{
		{"own", func(*acceptedJSONCase) {}},
		{"stored has a contract the message lacks", func(c *acceptedJSONCase) { c.contractID = "" }},
		{"stored has every id the message lacks", func(c *acceptedJSONCase) { c.contractID, c.subjectID, c.schemaID = "", "", "" }},
		{"stored has a schema, the message none", func(c *acceptedJSONCase) { c.schemaID = "" }},
		{"stored has ids, the message hops alone", func(c *acceptedJSONCase) {
			c.contractID, c.subjectID, c.schemaID, c.hops, c.storedHops = "", "", "", 2, 2
		}},
		{"stored lacks a contract the message has", func(c *acceptedJSONCase) { c.storedContract = "" }},
		{"signed, stored has a contract the message lacks", func(c *acceptedJSONCase) {
			c.signed, c.sigKID, c.sigAlg, c.sig, c.contractID = true, "k", "ed25519", "c2ln", ""
		}},
		{"reason, stored has a contract the message lacks", func(c *acceptedJSONCase) { c.text[9], c.contractID = "released", "" }},
		{"data ending as ids do", func(c *acceptedJSONCase) {
			c.data, c.contractID = `{"a":1,"contractId":"ctr_1"}`, ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.change(&c)
			checkAcceptedJSON(t, &c)
		})
	}
}

// FuzzAcceptedJSON: for messages of arbitrary field values (escapes,
// unicode, empty fields, a signature, hops, any sequence) and stored
// envelopes of the same or other ids and depth, acceptedJSON is nil or
// byte for byte Message.AppendJSON, and never nil for the message's own
// stored envelope.
func FuzzAcceptedJSON(f *testing.F) {
	f.Add("msg_1", "payment", "pci", "uk", "", `{"amount":1}`, "", "", "", "ctr_1", "payments.events", "payment.v1", "ctr_1", "payments.events", "payment.v1", uint32(0), uint32(0), uint64(1), "2026-12-06T08:00:00.001Z", false)
	f.Add("msg_\u2028", "t\x7f\"", "", "\\", "released", `"s"`, "replies", "msg_0", "k1", "", "s", "", "ctr_\"", "s", "x", uint32(3), uint32(3), uint64(1<<63), "t", true)
	f.Add("a", "b", "c", "d", "", `{"x":1,"contractId":"c"}`, "", "", "", "", "s", "", "c", "s", "", uint32(0), uint32(0), uint64(9), "t", false)
	f.Add("a", "b", "c", "d", "", `[]`, "", "", "", "", "", "", "", "", "", uint32(1), uint32(10), uint64(1), "t", false)
	f.Fuzz(func(t *testing.T, id, typ, class, region, reason, data, replyTo, correlationID, kid,
		contractID, subjectID, schemaID, storedContract, storedSubj, storedSchm string,
		hops, storedHops uint32, seq uint64, acceptedAt string, signed bool,
	) {
		c := acceptedJSONCase{
			text: [10]string{id, typ, "spiffe://p", "payments.events", "2026-12-06T08:00:00.000Z", "authorize", kid, class, region, reason},
			data: data, replyTo: replyTo, correlationID: correlationID,
			sigKID: kid, sigAlg: "ed25519", sig: typ, sigV: int(hops % 3), signed: signed,
			contractID: contractID, subjectID: subjectID, schemaID: schemaID,
			storedContract: storedContract, storedSubj: storedSubj, storedSchm: storedSchm,
			hops: hops, storedHops: storedHops, seq: seq, acceptedAt: acceptedAt,
		}
		checkAcceptedJSON(t, &c)
		// The message's own stored envelope, whatever the fuzzer chose.
		c.storedContract, c.storedSubj, c.storedSchm, c.storedHops = contractID, subjectID, schemaID, hops
		checkAcceptedJSON(t, &c)
	})
}

// TestAcceptedJSONAllocatesTheEncodingAlone: the checks acceptedJSON
// makes of the stored envelope cost no allocation; the encoding it
// returns is its one.
func TestAcceptedJSONAllocatesTheEncodingAlone(t *testing.T) {
	for _, signed := range []bool{false, true} {
		c := acceptedJSONCase{
			text: [10]string{"msg_1", "payment", "spiffe://p", "payments.events", "2026-12-06T08:00:00.000Z", "authorize", "k-1", "pci", "uk", ""},
			data: `{"amount":1}`, seq: 7, acceptedAt: "2026-12-06T08:00:00.001Z", signed: signed, sigKID: "k1", sigAlg: "ed25519", sig: "c2ln",
			contractID: "ctr_1", subjectID: "payments.events", schemaID: "payment.v1",
			storedContract: "ctr_1", storedSubj: "payments.events", storedSchm: "payment.v1",
		}
		accepted, stored := c.messages()
		body := stored.AppendJSON(nil)
		require.NotNil(t, acceptedJSON(body, &accepted))
		require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = acceptedJSON(body, &accepted) }))
	}
}
