package pigeon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// hostileText are control characters a client, an admin or a policy file
// could carry into audit records, receipts, the data directory and the
// consoles that show them: ESC (an ANSI sequence), CSI as one C1
// character (U+009B), CR, LF, tab, DEL and NUL.
var hostileText = []struct{ name, s string }{
	{"ESC", "\x1b[2J"},
	{"C1 CSI", "\u009b31m"},
	{"CR", "\rforged"},
	{"LF", "\nforged"},
	{"tab", "\t"},
	{"DEL", "\x7f"},
	{"NUL", "\x00"},
}

// requireNoControlInAudit fails when a string field of an audit record of
// e holds a control character, or a formatting character that reorders
// text or breaks its line (pigeon.IsControlRune, the rule of names).
func requireNoControlInAudit(t *testing.T, e *pigeon.Engine) {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	for _, r := range recs {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		for k, v := range fields {
			if s, ok := v.(string); ok {
				require.False(t, strings.ContainsFunc(s, pigeon.IsControlRune), "audit record %s: %s holds a control or formatting character: %q", r.Type, k, s)
			}
		}
	}
}

// A replay's reason that holds a control character (C0, DEL, C1) is
// refused BAD_REQUEST before anything is read: no replay.executed record
// and no receipt carries it, and the replay.denied record does not either.
// Before, only its length and UTF-8 were checked, and ESC, CSI and CR went
// whole into the replay.executed record's ref and every receipt of it.
func TestReplayRefusesAReasonWithControlCharacters(t *testing.T) {
	f := historyFixture(t, newClock(), 10)
	writer := f.connect("dave-token", "rooms.history")
	m := chatIn("lobby", "hello")
	m.Subject = "rooms.history"
	_, err := writer.Publish(ctx, m)
	require.NoError(t, err)
	reader := f.connect("carol-token", "rooms.history")
	for _, h := range hostileText {
		t.Run(h.name, func(t *testing.T) {
			got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", Reason: "incident 42" + h.s})
			requireCode(t, err, pigeon.CodeBadRequest)
			require.Empty(t, got)
		})
	}
	require.Zero(t, auditCount(t, f.e, pigeon.EventReplayExecuted, pigeon.CodeOK), "nothing was replayed")
	require.Equal(t, len(hostileText), auditCount(t, f.e, pigeon.EventReplayDenied, pigeon.CodeBadRequest))
	requireNoControlInAudit(t, f.e)

	// Text, other scripts included, is a reason.
	got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", Reason: "incident 42 — réexécution ✓"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 1, auditCount(t, f.e, pigeon.EventReplayExecuted, pigeon.CodeOK))
}

// An account attribute whose name or value holds a control character, or
// whose name is empty, is refused INVALID_ARGUMENT: no account is created
// and nothing is audited. Before, attributes were stored (and listed, and
// shown by the console) as given.
func TestCreateAccountRefusesAttributesWithControlCharacters(t *testing.T) {
	f := accessFixture(t)
	type attrs = map[string]string
	cases := []struct {
		name  string
		attrs attrs
	}{{"empty name", attrs{"": "payments"}}}
	for _, h := range hostileText {
		cases = append(cases,
			struct {
				name  string
				attrs attrs
			}{"name/" + h.name, attrs{"team" + h.s: "payments"}},
			struct {
				name  string
				attrs attrs
			}{"value/" + h.name, attrs{"team": "payments" + h.s}})
	}
	cases = append(cases, struct {
		name  string
		attrs attrs
	}{"value not UTF-8", attrs{"team": "pay\xffments"}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://chat/frank", Attributes: tc.attrs})
			requireCode(t, err, pigeon.CodeInvalidArgument)
			_, err = f.e.GetAccount(ctx, "spiffe://chat/frank")
			requireCode(t, err, pigeon.CodeNotFound)
		})
	}
	require.Zero(t, auditCount(t, f.e, pigeon.EventAccountCreated, pigeon.CodeOK))
	requireNoControlInAudit(t, f.e)

	a, err := f.e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://chat/frank", Attributes: attrs{"team": "paiements — équipe 2"}})
	require.NoError(t, err)
	require.Equal(t, "paiements — équipe 2", a.Attributes["team"])
}

// A role whose permission names a subject with a control character is
// refused BAD_REQUEST and not defined. Before, it was stored and listed
// as given.
func TestPutRoleRefusesASubjectWithControlCharacters(t *testing.T) {
	f := accessFixture(t)
	for _, h := range hostileText {
		t.Run(h.name, func(t *testing.T) {
			_, err := f.e.PutRole(ctx, pigeon.Role{Name: "reader", Permissions: []pigeon.Permission{
				{Subject: "rooms.chat" + h.s, Operations: []pigeon.Operation{pigeon.OpReceive}}}})
			requireCode(t, err, pigeon.CodeBadRequest)
			_, err = f.e.GetRole(ctx, "reader")
			require.Error(t, err, "no role is defined")
		})
	}
	require.Zero(t, auditCount(t, f.e, pigeon.EventRoleDefined, pigeon.CodeOK))
}

// A catalog whose subject (or any other name) holds a control character
// is refused POLICY_INVALID by the broker, at start and by LoadCatalog,
// and the refusal quotes the name: nothing is registered. Before, the
// broker registered it, and its name went raw into subject.registered
// records and every decision on the subject.
func TestCatalogWithControlCharactersIsRefused(t *testing.T) {
	hostileCatalog := func(v string) *pigeon.Catalog {
		c := transporttest.Options().Catalog
		c.Subjects = append(c.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.evil" + v, Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}}},
		})
		return c
	}
	for _, h := range hostileText {
		t.Run(h.name, func(t *testing.T) {
			_, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(), Catalog: hostileCatalog(h.s)})
			pe := requireCode(t, err, pigeon.CodePolicyInvalid)
			require.False(t, strings.ContainsFunc(pe.Error(), unicode.IsControl), "the refusal quotes the name: %q", pe.Error())

			f := accessFixture(t)
			err = f.e.LoadCatalog(ctx, hostileCatalog(h.s))
			pe = requireCode(t, err, pigeon.CodePolicyInvalid)
			require.False(t, strings.ContainsFunc(pe.Error(), unicode.IsControl), "the refusal quotes the name: %q", pe.Error())
			requireNoControlInAudit(t, f.e)
		})
	}
}
