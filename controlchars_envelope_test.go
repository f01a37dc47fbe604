package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// envelopeNames sets each name of a message's envelope (its id, and the
// names the publisher chooses) to a value ending with v: the names the
// broker refuses when they hold a control or formatting character.
var envelopeNames = []struct {
	name string
	set  func(m *pigeon.Message, v string)
}{
	{"id", func(m *pigeon.Message, v string) { m.ID = "msg-1" + v }},
	{"subject", func(m *pigeon.Message, v string) { m.Subject += v }},
	{"type", func(m *pigeon.Message, v string) { m.Type += v }},
	{"intent", func(m *pigeon.Message, v string) { m.Intent += v }},
	{"idempotencyKey", func(m *pigeon.Message, v string) { m.IdempotencyKey = "k" + v }},
	{"classification", func(m *pigeon.Message, v string) { m.Classification = "internal" + v }},
	{"region", func(m *pigeon.Message, v string) { m.Region = "uk" + v }},
	{"replyTo", func(m *pigeon.Message, v string) { m.ReplyTo = "inbox" + v }},
	{"correlationId", func(m *pigeon.Message, v string) { m.CorrelationID = "c" + v }},
	{"signature.kid", func(m *pigeon.Message, v string) {
		m.Signature = &pigeon.Signature{KID: "k" + v, Alg: "EdDSA", Sig: "AAAA"}
	}},
	{"signature.alg", func(m *pigeon.Message, v string) {
		m.Signature = &pigeon.Signature{KID: "k", Alg: "EdDSA" + v, Sig: "AAAA"}
	}},
}

// A message whose names (subject, type, intent, idempotencyKey,
// classification, region, replyTo, correlationId, the signature's kid,
// alg and sig) hold a control character (C0, DEL, C1) is refused
// ENVELOPE_INVALID: nothing is accepted or stored, and the publish.denied
// record carries no control character. Before, such a message was
// accepted, stored and delivered, and copied into quarantine records;
// and one to a subject with ESC in its name was refused SUBJECT_NOT_FOUND
// with the name written raw into the record. Reason is prose and is not
// refused for its content.
func TestPublishRefusesNamesWithControlCharacters(t *testing.T) {
	f := accessFixture(t)
	s := f.connect("alice-token", "chat.messages")
	requireEnvelopeNamesRefused(t, s, hostileText, "")
	require.Zero(t, auditCount(t, f.e, pigeon.EventPublishAccepted, pigeon.CodeOK), "nothing was accepted")
	requireNoControlInAudit(t, f.e)

	m := chatFor()
	m.Reason = "line one\nline two"
	_, err := s.Publish(ctx, m)
	require.NoError(t, err, "a reason is prose")
}

// A name a client chooses that the broker does not know, and so cannot
// refuse by shape before it records the refusal (a subject a contract is
// asked for, a quarantine record's id a release names), is written into
// the audit record quoted when it holds a control character. Before, ESC,
// CSI and CR went raw into contract.denied and quarantine.released.
func TestAuditQuotesUnknownNamesWithControlCharacters(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { *o = *transporttest.Options() })
	for _, h := range hostileText {
		t.Run(h.name, func(t *testing.T) {
			_, err := f.e.Connect(ctx, "alice-token", []string{"chat.messages", "nope" + h.s})
			requireCode(t, err, pigeon.CodeSubjectNotFound)
			s := f.connect("alice-token", "chat.messages")
			_, err = f.e.ReleaseQuarantine(ctx, callerOf(s), "q"+h.s)
			requireCode(t, err, pigeon.CodeQuarantineNotFound)
		})
	}
	require.Equal(t, len(hostileText), auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeSubjectNotFound), "every refusal is recorded")
	requireNoControlInAudit(t, f.e)
}

// chatFor is a message to chat.messages that the access fixture's alice
// may publish.
func chatFor() *pigeon.Message {
	return &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"text":"hi"}`)}
}

// requireEnvelopeNamesRefused publishes, on s, chatFor with each name of
// envelopeNames ending with each of chars, and requires each refused
// ENVELOPE_INVALID, its message holding text when text is not empty.
func requireEnvelopeNamesRefused(t *testing.T, s pigeon.Session, chars []struct{ name, s string }, text string) {
	t.Helper()
	for _, fl := range envelopeNames {
		for _, c := range chars {
			t.Run(fl.name+"/"+c.name, func(t *testing.T) {
				m := chatFor()
				fl.set(m, c.s)
				_, err := s.Publish(ctx, m)
				pe := requireCode(t, err, pigeon.CodeEnvelopeInvalid)
				if text != "" {
					require.Contains(t, pe.Error(), text)
				}
			})
		}
	}
}
