package pigeon_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestDirectoryWritesBoundEveryText: every text field of a record of the
// access directory is bounded for an in-process caller as for a remote
// one (whose request body only the server's limit bounds). At its bound a
// field is accepted; one byte over, and far over, the write is refused
// with the bound's code, the refusal does not echo the text, and nothing
// is written or audited. Before, a role permission's subject took any
// length: every node keeps every role, and listings and the console show
// it.
func TestDirectoryWritesBoundEveryText(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	longRole := strings.Repeat("r", pigeon.MaxIDLength)
	repeat := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name  string
		bound int
		code  pigeon.Code
		// text is a text of n bytes for the field (repeat when nil);
		// setup makes what write changes; write puts text in the field.
		text  func(n int) string
		setup func(t *testing.T, e *pigeon.Engine)
		write func(e *pigeon.Engine, text string) error
	}{
		{
			name: "an account's id (CreateAccount)", bound: pigeon.MaxIDLength, code: pigeon.CodeInvalidArgument,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: s})
				return err
			},
		},
		{
			name: "a role an account holds (CreateAccount)", bound: pigeon.MaxIDLength, code: pigeon.CodeInvalidArgument,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{s}})
				return err
			},
		},
		{
			name: "a role given to an account (AddAccountRole)", bound: pigeon.MaxIDLength, code: pigeon.CodeInvalidArgument,
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol})
				require.NoError(t, err)
			},
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.AddAccountRole(ctx, carol, s)
				return err
			},
		},
		{
			name: "an attribute's name (CreateAccount)", bound: pigeon.MaxAttributeNameLength, code: pigeon.CodeInvalidArgument,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Attributes: map[string]string{s: "x"}})
				return err
			},
		},
		{
			name: "an attribute's value (CreateAccount)", bound: pigeon.MaxAttributeValueLength, code: pigeon.CodeInvalidArgument,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Attributes: map[string]string{"team": s}})
				return err
			},
		},
		{
			// A key's other fields are one of two values (use, alg) or
			// 32 bytes (key); a refused key is BAD_REQUEST.
			name: "a key's kid (CreateAccount)", bound: 128, code: pigeon.CodeBadRequest,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Keys: []pigeon.PublicKey{pigeon.Ed25519PublicKey(s, pub)}})
				return err
			},
		},
		{
			name: "a role's name (PutRole)", bound: pigeon.MaxIDLength, code: pigeon.CodeInvalidArgument,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.PutRole(ctx, pigeon.Role{Name: s, Permissions: permissionsOf(1)})
				return err
			},
		},
		{
			// The longest subject a message names.
			name: "a permission's subject (PutRole)", bound: pigeon.MaxEnvelopeField, code: pigeon.CodeInvalidArgument,
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.PutRole(ctx, pigeon.Role{Name: "wide", Permissions: []pigeon.Permission{{Subject: s, Operations: []pigeon.Operation{pigeon.OpPublish}}}})
				return err
			},
		},
		{
			name: "a permission's selector (PutRole)", bound: pigeon.MaxSelectorLen, code: pigeon.CodeSelectorInvalid,
			text: func(n int) string { return "/room=" + strings.Repeat("x", n-len("/room=")) },
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.PutRole(ctx, pigeon.Role{Name: "wide", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}, Selector: s}}})
				return err
			},
		},
		{
			name: "a grant's role (IssueGrant)", bound: pigeon.MaxIDLength, code: pigeon.CodeInvalidArgument,
			text: func(n int) string { return strings.Repeat("r", n) },
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{longRole}})
				require.NoError(t, err)
			},
			write: func(e *pigeon.Engine, s string) error {
				_, err := e.IssueGrant(ctx, carol, []string{s}, time.Hour)
				return err
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.text
			if text == nil {
				text = repeat
			}
			st := storeOf(t)
			f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
			if tc.setup != nil {
				tc.setup(t, f.e)
			}
			stored := quotaSnapshot(t, st)
			audited := auditLen(t, f.e)
			for _, over := range []int{tc.bound + 1, 1 << 20} {
				pe := requireCode(t, tc.write(f.e, text(over)), tc.code)
				require.Less(t, len(pe.Error()), 512, "the refusal does not echo the text")
				require.Equal(t, stored, quotaSnapshot(t, st), "nothing is written")
				require.Equal(t, audited, auditLen(t, f.e), "nothing is audited")
			}
			require.NoError(t, tc.write(f.e, text(tc.bound)), "at the bound")
		})
	}
}

// TestDirectoryLoadSkipsAStoredPermissionOfALongSubject: a permission
// stored with a subject longer than PutRole takes (an earlier broker, a
// store written behind the broker's back) grants nothing: the role loads
// without it, beside the permissions it holds within the bound, and the
// warning names the subject cut.
func TestDirectoryLoadSkipsAStoredPermissionOfALongSubject(t *testing.T) {
	long := strings.Repeat("s", 8192)
	st := storeOf(t, storedRecord{"roles", "wide", `{"name":"wide","permissions":[` +
		`{"subject":` + quoteJSON(long) + `,"operations":["publish"]},` +
		`{"subject":"rooms.chat","operations":["publish"]}]}`})
	var logged strings.Builder
	var mu sync.Mutex
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, nil))
	})
	r, err := f.e.GetRole(ctx, "wide")
	require.NoError(t, err)
	require.Equal(t, []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}, r.Permissions)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logged.String(), "at most "+strconv.Itoa(pigeon.MaxEnvelopeField)+" bytes")
	require.Less(t, logged.Len(), 4096, "the warning does not hold the whole subject")
}
