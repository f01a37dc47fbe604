package pigeon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"pigeon/store"
)

// PutAccountKeys replaces the public keys account id publishes. Keys that
// are no longer valid stay listed so older signatures still verify; callers
// rotate by adding a key with a later NotBefore and closing the old one's
// NotAfter. A key belongs for good to the first account that publishes
// it: one that another account publishes, or published before it dropped
// the key or was deleted, is refused with CONFLICT, since every signature
// and sealed payload the key made would verify as the new holder's. Like
// the other account methods it trusts its caller: the embedding program
// decides who may publish what. A remote caller goes through
// PutAccountKeysAs. The change is audited as account.keys.published
// (principal: the account; ref: what changed, see PutAccountKeysAs). A
// list that only removes keys or narrows their windows withdraws access:
// like a revocation it goes on while the audit log cannot be written (its
// record lost, counted in audit.resumed) and once Shutdown began, while
// the store is open; any other is refused then.
func (e *Engine) PutAccountKeys(ctx context.Context, id string, keys []PublicKey) (Account, error) {
	return e.putAccountKeys(ctx, nil, id, keys)
}

// PutAccountKeysAs replaces the public keys account id publishes on behalf
// of p, as PutAccountKeys does, for a caller that is not trusted with every
// list. The account itself (p.ID is id, authenticated by its own
// credential) publishes any list. Anyone else, and any grant token (a grant
// hands out roles, not the keys that sign and seal as the account), must
// hold the role admin and may only remove keys or narrow their windows:
// adding a key, changing a key's bytes, use or alg, or widening a window is
// FORBIDDEN and changes nothing. A key listed under an account is what
// senders seal for and what verifies as the account: an admin free to
// list one of its own would read what is sealed for the account from then
// on. The list is judged against the account's keys as they are when it
// replaces them, under the lock that changes the account: a list read
// before the account removed a key cannot put the key back.
//
// Refusals (FORBIDDEN, CONFLICT, BAD_REQUEST, INVALID_ARGUMENT beyond
// MaxAccountKeys keys) are returned, not audited:
// the caller knows how it was asked (the server audits them as
// access.denied). A change is audited as account.keys.published, in the
// order of the changes: principal the account, ref "by P: CHANGES" where
// P is p's id (past 256 bytes cut, with "…#" and 16 hex digits of its
// SHA-256 after it; followed by " via grant" for a grant token) and CHANGES
// lists the kids added ("+kid"), removed ("-kid") and changed ("~kid"),
// or "no change"; past 480 bytes the kids left are counted, "(N more)".
func (e *Engine) PutAccountKeysAs(ctx context.Context, p *Principal, id string, keys []PublicKey) (Account, error) {
	if p == nil {
		return Account{}, NewError(CodeInvalidArgument, "PutAccountKeysAs needs the principal that acts")
	}
	return e.putAccountKeys(ctx, p, id, keys)
}

// putAccountKeys replaces account id's keys, for p when not nil (see
// PutAccountKeysAs), for the embedding program otherwise.
//
// Once Shutdown began, and while the audit log cannot be written, a list
// that only removes keys or narrows their windows takes access away
// only, and goes on (see Engine.Shutdown; its record then lost, counted
// in audit.resumed); any other is refused SHUTTING_DOWN or with the log's
// error (enterNarrowing), as it is judged under the lock that changes
// the account.
func (e *Engine) putAccountKeys(ctx context.Context, p *Principal, id string, keys []PublicKey) (Account, error) {
	leave, widening, err := e.enterNarrowing(ctx) // Shutdown waits for its record (inflight.go)
	if err != nil {
		return Account{}, err
	}
	defer leave()
	if err := checkKeys(keys); err != nil {
		return Account{}, err
	}
	narrowOnly := p != nil && (p.ID != id || p.Method == AuthGrant)
	if narrowOnly && !p.HasRole(RoleAdmin) {
		return Account{}, NewError(CodeForbidden, "only the account itself (not a grant token of it) or an admin may change its keys")
	}
	written := noWait
	a, err := e.dir.updateAccount(ctx, id, func(a *Account) error {
		if _, widened := keysNotNarrowed(a.Keys, keys); widened && widening != nil {
			return widening // it would give access
		}
		if !narrowOnly {
			a.Keys = slices.Clone(keys)
			return nil
		}
		if kid, widened := keysNotNarrowed(a.Keys, keys); widened {
			return NewError(CodeForbidden,
				"an admin may remove another account's keys or narrow their windows, not publish key %q: only the account itself publishes a key or widens its window", kid)
		}
		a.Keys = slices.Clone(keys)
		return nil
	}, func(before, after *Account) {
		written = e.auditInOrder(EventAccountKeysPublished.record("", CodeOK, store.AuditRecord{Principal: id, Ref: keysChangeRef(p, before.Keys, after.Keys)}))
	})
	written()
	if err == nil {
		err = e.clusterBarrier(ctx)
	}
	return a, err
}

// keysNotNarrowed returns the kid of the first key of next that is not a
// key of cur (the same kid, use, alg and key) valid within that key's
// window, and true; or false when next only removes keys of cur or
// narrows their windows. (cur holds each kid once: ValidateKeys.)
func keysNotNarrowed(cur, next []PublicKey) (string, bool) {
	for _, k := range next {
		i := slices.IndexFunc(cur, func(c PublicKey) bool { return c.KID == k.KID })
		if i < 0 {
			return k.KID, true
		}
		c := cur[i]
		if c.Use != k.Use || c.Alg != k.Alg || c.Key != k.Key ||
			!c.NotBefore.IsZero() && (k.NotBefore.IsZero() || k.NotBefore.Before(c.NotBefore)) ||
			!c.NotAfter.IsZero() && (k.NotAfter.IsZero() || k.NotAfter.After(c.NotAfter)) {
			return k.KID, true
		}
	}
	return "", false
}

// maxKeysRef bounds the ref of an account.keys.published record, under
// the 512 bytes the audit log keeps of a text (an actor of 256 bytes and
// 128 kids of 128 would be over 16 KiB): the kids that do not fit are
// counted, "(N more)".
const maxKeysRef = 480

// keysChangeRef is the ref of the account.keys.published record of a
// change from old to next made by p (nil: the embedding program): "by
// P: " (P's id, " via grant" after it for a grant token), then the kids
// added ("+kid"), removed ("-kid") and changed ("~kid": its key, use, alg
// or window) in that order, or "no change". Kids are printable ASCII
// without spaces (checkKID), so the list reads back unambiguously.
func keysChangeRef(p *Principal, old, next []PublicKey) string {
	var added, removed, changed []string
	for _, k := range next {
		i := slices.IndexFunc(old, func(c PublicKey) bool { return c.KID == k.KID })
		switch {
		case i < 0:
			added = append(added, "+"+k.KID)
		case !sameKey(old[i], k):
			changed = append(changed, "~"+k.KID)
		}
	}
	for _, c := range old {
		if !slices.ContainsFunc(next, func(k PublicKey) bool { return k.KID == c.KID }) {
			removed = append(removed, "-"+c.KID)
		}
	}
	var b strings.Builder
	if p != nil {
		b.WriteString("by " + keysActor(p.ID))
		if p.Method == AuthGrant {
			b.WriteString(" via grant")
		}
		b.WriteString(":")
	}
	all := slices.Concat(added, removed, changed)
	if len(all) == 0 {
		all = []string{"no change"}
	}
	const room = len(" (128 more)") // at most 2*MaxAccountKeys changes
	for i, c := range all {
		need := 1 + len(c)
		if i < len(all)-1 {
			need += room // what is left must still be counted
		}
		if b.Len()+need > maxKeysRef {
			b.WriteString(" (" + strconv.Itoa(len(all)-i) + " more)")
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c)
	}
	return b.String()
}

// maxKeysActor bounds the actor's id in a keys change's ref, so the
// changes keep room beside an id of up to 1024 bytes (an OIDC principal).
const maxKeysActor = 256

// keysActor is id as a keys change's ref names it: whole up to
// maxKeysActor bytes; a longer id is cut at a rune and followed by
// "…#" and 16 hex digits of its SHA-256, which keeps two long ids that
// share a prefix apart.
func keysActor(id string) string {
	if len(id) <= maxKeysActor {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	tail := "…#" + hex.EncodeToString(sum[:8])
	cut := maxKeysActor - len(tail)
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + tail
}

// sameKey reports whether a and b are the same key with the same window.
func sameKey(a, b PublicKey) bool {
	return a.KID == b.KID && a.Use == b.Use && a.Alg == b.Alg && a.Key == b.Key &&
		a.NotBefore.Equal(b.NotBefore) && a.NotAfter.Equal(b.NotAfter)
}

// AccountKeys returns the public keys account id publishes.
func (e *Engine) AccountKeys(_ context.Context, id string) ([]PublicKey, error) {
	return e.dir.accountKeys(id)
}
