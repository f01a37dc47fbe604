package pigeon_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// formattingChars are the Unicode formatting characters that reorder or
// break what an operator sees of a name ("Trojan Source",
// CVE-2021-42574): "alice\u202Egnp.exe" shows as "aliceexe.png", and
// U+2028 is a newline to JavaScript and to some terminals and log
// viewers. The broker refuses them in every name it refuses a control
// character in.
var formattingChars = []struct{ name, s string }{
	{"ALM U+061C", "\u061c"},
	{"LRM U+200E", "\u200e"},
	{"RLM U+200F", "\u200f"},
	{"LS U+2028", "\u2028"},
	{"PS U+2029", "\u2029"},
	{"LRE U+202A", "\u202a"},
	{"RLE U+202B", "\u202b"},
	{"PDF U+202C", "\u202c"},
	{"LRO U+202D", "\u202d"},
	{"RLO U+202E", "\u202e"},
	{"LRI U+2066", "\u2066"},
	{"RLI U+2067", "\u2067"},
	{"FSI U+2068", "\u2068"},
	{"PDI U+2069", "\u2069"},
}

// textNeighbours is text a name may hold: other scripts, right-to-left
// ones included, punctuation whose UTF-8 starts as a formatting
// character's does (U+2026, U+2027, U+202F, U+061F), and the zero width
// joiners emoji, Persian and Indic scripts are written with, which
// reorder nothing.
const textNeighbours = "é日本…‧\u202f؟مرحبا👩\u200d💻می\u200cخواهم"

// An account whose id, role or attribute holds a formatting character is
// refused INVALID_ARGUMENT, and a role whose name or permission's subject
// holds one is refused: nothing is created or defined. Ids and role names
// were ASCII already; attributes and a role's subjects were stored, listed
// and shown by the console as given.
func TestDirectoryRefusesNamesWithFormattingCharacters(t *testing.T) {
	f := accessFixture(t)
	type attrs = map[string]string
	for _, fc := range formattingChars {
		t.Run(fc.name, func(t *testing.T) {
			for _, a := range []pigeon.Account{
				{ID: "spiffe://chat/alice" + fc.s + "gnp.exe"},
				{ID: "spiffe://chat/frank", Roles: []string{"reader" + fc.s}},
				{ID: "spiffe://chat/frank", Attributes: attrs{"team" + fc.s: "payments"}},
				{ID: "spiffe://chat/frank", Attributes: attrs{"team": "payments" + fc.s + "admin"}},
			} {
				_, err := f.e.CreateAccount(ctx, a)
				requireCode(t, err, pigeon.CodeInvalidArgument)
			}
			_, err := f.e.GetAccount(ctx, "spiffe://chat/frank")
			requireCode(t, err, pigeon.CodeNotFound)

			_, err = f.e.PutRole(ctx, pigeon.Role{Name: "reader" + fc.s, Permissions: []pigeon.Permission{
				{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
			requireCode(t, err, pigeon.CodeInvalidArgument)
			_, err = f.e.PutRole(ctx, pigeon.Role{Name: "reader", Permissions: []pigeon.Permission{
				{Subject: "rooms.chat" + fc.s, Operations: []pigeon.Operation{pigeon.OpReceive}}}})
			requireCode(t, err, pigeon.CodeBadRequest)
			_, err = f.e.GetRole(ctx, "reader")
			require.Error(t, err, "no role is defined")
		})
	}
	require.Zero(t, auditCount(t, f.e, pigeon.EventAccountCreated, pigeon.CodeOK))
	require.Zero(t, auditCount(t, f.e, pigeon.EventRoleDefined, pigeon.CodeOK))
	requireNoControlInAudit(t, f.e)

	a, err := f.e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://chat/frank", Attributes: attrs{"équipe " + textNeighbours: textNeighbours}})
	require.NoError(t, err, "text that reorders nothing is an attribute")
	require.Equal(t, textNeighbours, a.Attributes["équipe "+textNeighbours])
	_, err = f.e.PutRole(ctx, pigeon.Role{Name: "reader", Permissions: []pigeon.Permission{
		{Subject: "rooms." + textNeighbours, Operations: []pigeon.Operation{pigeon.OpReceive}}}})
	require.NoError(t, err, "text that reorders nothing is a subject")
}

// A message whose id or names hold a formatting character is refused
// ENVELOPE_INVALID, and nothing is accepted; its data and reason are the
// publisher's text and are not refused for one. Before, such a message
// was accepted, stored and delivered, and its id and names written raw
// into audit records, quarantine records and receipts.
func TestPublishRefusesNamesWithFormattingCharacters(t *testing.T) {
	f := accessFixture(t)
	s := f.connect("alice-token", "chat.messages")
	requireEnvelopeNamesRefused(t, s, formattingChars, "formatting character")
	require.Zero(t, auditCount(t, f.e, pigeon.EventPublishAccepted, pigeon.CodeOK), "nothing was accepted")
	requireNoControlInAudit(t, f.e)

	var all strings.Builder
	for _, fc := range formattingChars {
		all.WriteString(fc.s)
	}
	m := chatFor()
	m.ID = "msg-" + textNeighbours
	m.IdempotencyKey = "k-" + textNeighbours
	m.Reason = "line one\u2028line two \u202eprose"
	m.Data, _ = json.Marshal(map[string]string{"text": "alice" + all.String() + "gnp.exe"})
	_, err := s.Publish(ctx, m)
	require.NoError(t, err, "the data and the reason are the publisher's text; the id and key reorder nothing")
}

// A replay's reason that holds a formatting character is refused
// BAD_REQUEST, as one with a control character is: it is written whole
// into the replay.executed record and every receipt of it.
func TestReplayRefusesAReasonWithFormattingCharacters(t *testing.T) {
	f := historyFixture(t, newClock(), 10)
	writer := f.connect("dave-token", "rooms.history")
	m := chatIn("lobby", "hello")
	m.Subject = "rooms.history"
	_, err := writer.Publish(ctx, m)
	require.NoError(t, err)
	reader := f.connect("carol-token", "rooms.history")
	for _, fc := range formattingChars {
		t.Run(fc.name, func(t *testing.T) {
			got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", Reason: "incident 42" + fc.s + " resolved"})
			requireCode(t, err, pigeon.CodeBadRequest)
			require.Empty(t, got)
		})
	}
	require.Zero(t, auditCount(t, f.e, pigeon.EventReplayExecuted, pigeon.CodeOK), "nothing was replayed")
	require.Equal(t, len(formattingChars), auditCount(t, f.e, pigeon.EventReplayDenied, pigeon.CodeBadRequest))

	got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", Reason: "incident 42 — " + textNeighbours})
	require.NoError(t, err)
	require.Len(t, got, 1)
	requireNoControlInAudit(t, f.e)
}

// A principal id an authenticator returns with a formatting character is
// refused UNAUTHENTICATED, as one with a control character is: the id is
// written into every record of what the principal does.
func TestAuthenticatedPrincipalIDHoldsNoFormattingCharacter(t *testing.T) {
	for _, fc := range formattingChars {
		t.Run(fc.name, func(t *testing.T) {
			f := newFixture(t, func(o *pigeon.Options) {
				o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: "alice" + fc.s + "gnp.exe"})
			})
			_, err := f.e.Authenticate(ctx, "t")
			requireCode(t, err, pigeon.CodeUnauthenticated)
		})
	}
	f := newFixture(t, func(o *pigeon.Options) {
		o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: "spiffe://chat/" + textNeighbours})
	})
	_, err := f.e.Authenticate(ctx, "t")
	require.NoError(t, err)
}

// A name the broker records without knowing it (a subject a contract is
// asked for, a quarantine record's id a release names) is written into
// the audit record quoted when it holds a formatting character, as when
// it holds a control character.
func TestAuditQuotesUnknownNamesWithFormattingCharacters(t *testing.T) {
	f := accessFixture(t)
	for _, fc := range formattingChars {
		t.Run(fc.name, func(t *testing.T) {
			_, err := f.e.Connect(ctx, "alice-token", []string{"chat.messages", "nope" + fc.s})
			requireCode(t, err, pigeon.CodeSubjectNotFound)
			s := f.connect("alice-token", "chat.messages")
			_, err = f.e.ReleaseQuarantine(ctx, callerOf(s), "q"+fc.s)
			requireCode(t, err, pigeon.CodeQuarantineNotFound)
		})
	}
	require.Equal(t, len(formattingChars), auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeSubjectNotFound), "every refusal is recorded")
	requireNoControlInAudit(t, f.e)
}
