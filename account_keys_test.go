package pigeon_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

const keysAccount = "spiffe://merchant-prod/ns/shop/sa/keys"

// keysAdmin is an admin acting on keysAccount from its own account.
var keysAdmin = &pigeon.Principal{ID: "spiffe://merchant-prod/ns/ops/sa/admin", Roles: []string{pigeon.RoleAdmin}, Method: pigeon.AuthToken}

// keysSelf is keysAccount with its own credential.
var keysSelf = &pigeon.Principal{ID: keysAccount, Method: pigeon.AuthToken}

// newSigKey is a fresh signing key named kid.
func newSigKey(t *testing.T, kid string) pigeon.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return pigeon.Ed25519PublicKey(kid, pub)
}

// keysRefs is the refs of the account.keys.published records of account,
// in log order.
func keysRefs(t *testing.T, e *pigeon.Engine, account string) []string {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var refs []string
	for _, r := range recs {
		if r.Type == string(pigeon.EventAccountKeysPublished) && r.Principal == account {
			refs = append(refs, r.Ref)
		}
	}
	return refs
}

// TestAdminKeyListCannotPutBackAKeyTheAccountRemoved: the server read the
// account's keys, judged an admin's list against them (only removing keys
// or narrowing windows), then handed the list to PutAccountKeys: an admin
// whose list was read just before the account itself removed a key (one it
// found compromised) put that key back, the account's removal undone by a
// request that was only meant to narrow a window. The judgement now sits
// in the engine (PutAccountKeysAs), made against the keys as they are when
// the list replaces them, under the directory's lock: the list an admin
// read before the removal is refused, and the key stays removed.
func TestAdminKeyListCannotPutBackAKeyTheAccountRemoved(t *testing.T) {
	f := newFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: keysAccount})
	require.NoError(t, err)
	sig, leaked := newSigKey(t, "sig-1"), newSigKey(t, "sig-leaked")
	_, err = f.e.PutAccountKeysAs(ctx, keysSelf, keysAccount, []pigeon.PublicKey{sig, leaked})
	require.NoError(t, err)

	read, err := f.e.AccountKeys(ctx, keysAccount) // the admin reads the list
	require.NoError(t, err)
	_, err = f.e.PutAccountKeysAs(ctx, keysSelf, keysAccount, []pigeon.PublicKey{sig}) // the account drops the leaked key
	require.NoError(t, err)

	narrowed := read[0]
	narrowed.NotAfter = f.clock.Now().Add(time.Hour)
	_, err = f.e.PutAccountKeysAs(ctx, keysAdmin, keysAccount, []pigeon.PublicKey{narrowed, read[1]})
	requireCode(t, err, pigeon.CodeForbidden)
	keys, err := f.e.AccountKeys(ctx, keysAccount)
	require.NoError(t, err)
	require.Equal(t, []pigeon.PublicKey{sig}, keys, "the removed key stays removed")

	// Judged against the list as it is now, the narrowing alone passes.
	_, err = f.e.PutAccountKeysAs(ctx, keysAdmin, keysAccount, []pigeon.PublicKey{narrowed})
	require.NoError(t, err)
}

// TestPutAccountKeysAsJudgesWhoActs: the account itself publishes any
// list; an admin, or any grant token (even one of the account with the
// admin role), only removes keys or narrows windows; a principal that is
// neither is refused outright. PutAccountKeys, the embedding program's,
// still publishes any list.
func TestPutAccountKeysAsJudgesWhoActs(t *testing.T) {
	f := newFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: keysAccount})
	require.NoError(t, err)
	grant := &pigeon.Principal{ID: keysAccount, Roles: []string{pigeon.RoleAdmin}, Method: pigeon.AuthGrant}
	stranger := &pigeon.Principal{ID: "spiffe://merchant-prod/ns/shop/sa/other", Method: pigeon.AuthToken}

	tests := []struct {
		name string
		p    *pigeon.Principal
		want pigeon.Code
	}{
		{"the account itself adds a key", keysSelf, pigeon.CodeOK},
		{"an admin adds a key", keysAdmin, pigeon.CodeForbidden},
		{"a grant token of the account, admin role, adds a key", grant, pigeon.CodeForbidden},
		{"another principal without the role", stranger, pigeon.CodeForbidden},
		{"no principal", nil, pigeon.CodeInvalidArgument},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := f.e.AccountKeys(ctx, keysAccount)
			require.NoError(t, err)
			next := append(before, newSigKey(t, "k"+itoa(i)))
			_, err = f.e.PutAccountKeysAs(ctx, tt.p, keysAccount, next)
			require.Equal(t, tt.want, pigeon.ErrorCode(err), "%v", err)
			after, err := f.e.AccountKeys(ctx, keysAccount)
			require.NoError(t, err)
			if tt.want == pigeon.CodeOK {
				require.Equal(t, next, after)
			} else {
				require.Equal(t, before, after, "a refusal changes nothing")
			}
		})
	}
	_, err = f.e.PutAccountKeysAs(ctx, stranger, keysAccount, nil)
	requireCode(t, err, pigeon.CodeForbidden) // not even a removal
	_, err = f.e.PutAccountKeysAs(ctx, grant, keysAccount, nil)
	require.NoError(t, err, "a grant token with the admin role removes keys")
	_, err = f.e.PutAccountKeys(ctx, keysAccount, []pigeon.PublicKey{newSigKey(t, "embedder")})
	require.NoError(t, err, "the embedding program decides")
}

// TestKeyChangesAuditedWithWhoActedAndWhatChanged: account.keys.published
// named the account and nothing else, so an admin's removal of a key read
// in the log exactly as the account's own rotation, and nobody could tell
// from it which key went or came. The record names who acted ("by ID",
// "via grant" for a grant token) and the kids added, removed and changed.
func TestKeyChangesAuditedWithWhoActedAndWhatChanged(t *testing.T) {
	f := newFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: keysAccount})
	require.NoError(t, err)
	a, b, c := newSigKey(t, "a"), newSigKey(t, "b"), newSigKey(t, "c")
	narrowed := a
	narrowed.NotAfter = f.clock.Now().Add(time.Hour)
	grant := &pigeon.Principal{ID: keysAccount, Roles: []string{pigeon.RoleAdmin}, Method: pigeon.AuthGrant}

	_, err = f.e.PutAccountKeysAs(ctx, keysSelf, keysAccount, []pigeon.PublicKey{a, b})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeysAs(ctx, keysAdmin, keysAccount, []pigeon.PublicKey{narrowed})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeysAs(ctx, grant, keysAccount, []pigeon.PublicKey{narrowed})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeys(ctx, keysAccount, []pigeon.PublicKey{c})
	require.NoError(t, err)

	require.Equal(t, []string{
		"by " + keysAccount + ": +a +b",
		"by " + keysAdmin.ID + ": -b ~a",
		"by " + keysAccount + " via grant: no change",
		"+c -a",
	}, keysRefs(t, f.e, keysAccount))
}

// TestKeyChangeRefIsBounded: 64 kids of 128 characters removed and 64
// added would make a ref of over 16 KiB; the audit log cuts a text at 512
// bytes in the middle of a kid. The ref lists what fits and counts the
// rest.
func TestKeyChangeRefIsBounded(t *testing.T) {
	f := newFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: keysAccount})
	require.NoError(t, err)
	many := func(prefix string) []pigeon.PublicKey {
		keys := make([]pigeon.PublicKey, pigeon.MaxAccountKeys)
		for i := range keys {
			keys[i] = newSigKey(t, prefix+strings.Repeat("x", 120)+itoa(1000+i))
		}
		return keys
	}
	_, err = f.e.PutAccountKeysAs(ctx, keysSelf, keysAccount, many("a"))
	require.NoError(t, err)
	_, err = f.e.PutAccountKeysAs(ctx, keysSelf, keysAccount, many("b"))
	require.NoError(t, err)
	refs := keysRefs(t, f.e, keysAccount)
	require.Len(t, refs, 2)
	for _, ref := range refs {
		require.LessOrEqual(t, len(ref), 480, ref)
		require.NotContains(t, ref, "cut from", "bounded before the log cuts it")
		require.Regexp(t, `^by `+keysAccount+`:( [+-][ab]x{120}1\d{3})+ \(\d+ more\)$`, ref)
	}
	require.Contains(t, refs[1], "(125 more)", "three of 128 changes fit")
}
