package pigeon_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestEnvelopeFieldsAreBounded: every text field of the envelope a
// publisher sets is at most MaxEnvelopeField bytes (a reason MaxReason),
// whatever the subject's policy otherwise allows, so no message carries a
// region, an intent or a replyTo of a megabyte to every receiver. At the
// bound it is admitted; one byte over, refused ENVELOPE_INVALID naming
// the field, and audited.
func TestEnvelopeFieldsAreBounded(t *testing.T) {
	long := func(n int) string { return strings.Repeat("r", n) }
	for _, tc := range []struct {
		field   string
		most    int
		set     func(m *pigeon.Message, v string)
		atBound bool // a value of the bound's length passes the other gates too
	}{
		{"region", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.Region = v }, true},
		{"replyTo", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.ReplyTo = v }, true},
		{"reason", pigeon.MaxReason, func(m *pigeon.Message, v string) { m.Reason = v }, true},
		{"id", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.ID = v }, true},
		{"type", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.Type = v }, true},
		{"intent", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.Intent = v }, false},
		{"classification", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.Classification = v }, false},
		// A subject without a signature policy stores and delivers a
		// publisher's signature as it is: its fields are bounded too.
		{"signature.kid", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) {
			m.Signature = &pigeon.Signature{KID: v, Alg: "ed25519", Sig: "c2ln"}
		}, true},
		{"signature.alg", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.Signature = &pigeon.Signature{KID: "k", Alg: v, Sig: "c2ln"} }, true},
		{"signature.sig", pigeon.MaxEnvelopeField, func(m *pigeon.Message, v string) { m.Signature = &pigeon.Signature{KID: "k", Alg: "ed25519", Sig: v} }, true},
	} {
		t.Run(tc.field, func(t *testing.T) {
			e := chatEngine(t) // chat.messages allows any region
			s := chatSession(t, e, "alice-token", "chat.messages")
			if tc.atBound {
				m := chat(1)
				tc.set(m, long(tc.most))
				res, err := s.Publish(ctx, m)
				require.NoError(t, err, "at the bound")
				require.Equal(t, pigeon.StatusAccepted, res.Status)
			}
			m := chat(2)
			tc.set(m, long(tc.most+1))
			_, err := s.Publish(ctx, m)
			pe := requireCode(t, err, pigeon.CodeEnvelopeInvalid)
			require.Contains(t, pe.Message, "envelope field "+tc.field+" is longer than")
			require.Equal(t, 1, auditCount(t, e, pigeon.EventPublishDenied, pigeon.CodeEnvelopeInvalid))
		})
	}
}

// TestCallerRegionIsChecked: the region a session negotiates under, which
// becomes the region of every message that names none, is bounded as an
// envelope field and must be UTF-8.
func TestCallerRegionIsChecked(t *testing.T) {
	e := chatEngine(t)
	for _, tc := range []struct {
		name, region string
		code         pigeon.Code
	}{
		{"too long", strings.Repeat("r", pigeon.MaxEnvelopeField+1), pigeon.CodeBadRequest},
		{"not UTF-8", "u\xffk", pigeon.CodeInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Connect(ctx, "alice-token", []string{"chat.messages"}, pigeon.WithRegion(tc.region))
			requireCode(t, err, tc.code)
			require.Equal(t, 1, auditCount(t, e, pigeon.EventContractDenied, tc.code))
		})
	}
	s, err := e.Connect(ctx, "alice-token", []string{"chat.messages"}, pigeon.WithRegion(strings.Repeat("r", pigeon.MaxEnvelopeField)))
	require.NoError(t, err, "at the bound")
	require.NoError(t, s.Close(ctx))
}
