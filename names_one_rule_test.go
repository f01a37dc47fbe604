package pigeon_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// controlAndFormatting are the characters of the broker's one rule for a
// name that the places below used to let through: C1 (U+0085 NEXT LINE,
// U+009B CSI) and every formatting character that reorders or breaks a
// line.
var controlAndFormatting = append([]struct{ name, s string }{
	{"NEL U+0085", "\u0085"},
	{"CSI U+009B", "\u009b"},
}, formattingChars...)

// A consumer group name is a name: one that holds a C1 control or a
// formatting character that reorders or breaks a line (U+202E, U+2066)
// is refused INVALID_ARGUMENT and starts no subscription, as one with
// C0 or DEL is; text around them (other scripts, the zero width joiners)
// is a name. Before, only C0 and DEL were refused: a group
// "mailers\u202Eevil" was created, listed and shown reordered.
func TestGroupNamesRefuseControlAndFormattingCharacters(t *testing.T) {
	f := newFixture(t)
	s := f.connect("notifier-token", "notifications.send")
	for _, c := range controlAndFormatting {
		t.Run(c.name, func(t *testing.T) {
			sub, err := s.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup("mailers"+c.s+"evil"))
			requireCode(t, err, pigeon.CodeInvalidArgument)
			require.Nil(t, sub)
		})
	}
	sub, err := s.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup("mailers-"+textNeighbours))
	require.NoError(t, err)
	require.NoError(t, sub.Unsubscribe(ctx))
}

// A selector's key is a path of field names, and holds no formatting
// character that reorders or breaks a line, as the catalog's field paths
// do not; nor does the text after a '*' segment, which is no value. A
// value is data, compared with a string of the message that may be
// right-to-left text: it may hold them, and matches the message that
// holds the same. No part holds a control character (C0, DEL, C1).
// Before, a key "/tier\u202E=gold" was parsed, and the selector became
// part of a group's key, listed and shown reordered.
func TestSelectorKeysRefuseFormattingCharacters(t *testing.T) {
	for _, c := range formattingChars {
		t.Run(c.name, func(t *testing.T) {
			for _, sel := range []string{"/tier" + c.s + "=gold", "/" + c.s + "tier", "/customer." + c.s + "=gold", "/kind=chat/*/x" + c.s} {
				_, err := pigeon.ParseSelector(sel)
				pe := requireCode(t, err, pigeon.CodeSelectorInvalid)
				require.Contains(t, pe.Message, "formatting character")
				require.NotContains(t, pe.Message, c.s, "the message names a byte offset, not the text")
			}

			value := c.s + "مرحبا" + c.s
			sel, err := pigeon.ParseSelector("/customer.name=" + value)
			require.NoError(t, err, "a value is data")
			var data any
			require.NoError(t, json.Unmarshal([]byte(`{"customer":{"name":"`+value+`"}}`), &data))
			require.True(t, sel.Match(data))
			again, err := pigeon.ParseSelector(sel.String())
			require.NoError(t, err)
			require.True(t, again.Equal(sel), "the canonical text parses again")
		})
	}
	for _, c := range []string{"\x1b", "\x7f", "\u0085", "\u009b"} {
		_, err := pigeon.ParseSelector("/kind=chat" + c)
		requireCode(t, err, pigeon.CodeSelectorInvalid)
	}
	_, err := pigeon.ParseSelector("/" + textNeighbours + "=" + textNeighbours)
	require.NoError(t, err, "a key of other scripts and the zero width joiners is a name")
}

// A catalog whose subject holds a formatting character that reorders or
// breaks a line is refused POLICY_INVALID by the broker, at start and by
// LoadCatalog, as one with a control character is, and the refusal
// quotes the name escaped: nothing is registered. Before, the linter
// refused only control characters, and "rooms.evil\u202Egnp.exe" was
// registered and written into subject.registered records.
func TestCatalogWithFormattingCharactersIsRefused(t *testing.T) {
	hostileCatalog := func(v string) *pigeon.Catalog {
		c := transporttest.Options().Catalog
		c.Subjects = append(c.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.evil" + v + "gnp", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}}},
		})
		return c
	}
	for _, c := range formattingChars {
		t.Run(c.name, func(t *testing.T) {
			_, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(), Catalog: hostileCatalog(c.s)})
			pe := requireCode(t, err, pigeon.CodePolicyInvalid)
			require.False(t, strings.Contains(pe.Error(), c.s), "the refusal quotes the name: %q", pe.Error())

			f := accessFixture(t)
			err = f.e.LoadCatalog(ctx, hostileCatalog(c.s))
			pe = requireCode(t, err, pigeon.CodePolicyInvalid)
			require.False(t, strings.Contains(pe.Error(), c.s), "the refusal quotes the name: %q", pe.Error())
			requireNoControlInAudit(t, f.e)
			_, err = f.e.Subject("rooms.evil" + c.s + "gnp")
			requireCode(t, err, pigeon.CodeSubjectNotFound)
		})
	}
}
