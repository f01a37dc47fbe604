package pigeon

import (
	"sync"
	"time"

	"pigeon/internal/jsontext"
	"pigeon/internal/sortedkeys"
)

// Pages of a listing of the directory (ListAccountsPage, ListRolesPage):
// at most max entries, and at most MaxPageBytes of their JSON, counted
// without encoding them.

// pageOf returns copies (clone) of the first max entries of m by key that
// sort after the key after (every one after it when max <= 0), and
// whether another follows them. It finds them in x, the keys of m in order
// (sortedkeys): a binary search and the page, not a scan of every entry,
// so a directory of a million accounts answers a page of ten in ten
// copies and O(log n) steps, and a listing of it page by page costs one
// sort of its keys, not a pass over it for every page. A page of max > 0
// also ends before the entry that would take it past MaxPageBytes, each
// entry counted as size counts it (its JSON) with a comma between two, as
// the server counts the entries of its answer; more is then true. The
// first entry is on the page however large it is, so that paging by its
// last entry moves on. So a page of the largest accounts is at most about
// fifty copies, not max.
//
// The caller holds l, the directory's lock for reading. When x must sort
// the keys first (the first page, the first after the maps were replaced,
// or after more than sortedkeys.MaxChanged keys were added or removed), it
// gives l back while it sorts, and the page is read from the map as it is
// once l is taken again (m: the directory may have replaced its maps
// meanwhile).
func pageOf[T any](l sync.Locker, x *sortedkeys.Index[*T], m func() map[string]*T, after string, max int, clone func(*T) T, size func(*T) int) (page []T, more bool) {
	page = []T{}
	used := 0 // the bytes of the page's entries, commas included
	x.Walk(l, m, after, pageRoom(max), func(_ string, v *T) bool {
		if max <= 0 {
			page = append(page, clone(v))
			return true
		}
		if len(page) == max {
			more = true // one more follows a full page
			return false
		}
		n := size(v)
		if len(page) > 0 {
			n++ // the comma before it
			if used+n > MaxPageBytes {
				more = true
				return false
			}
		}
		used += n
		page = append(page, clone(v))
		return true
	})
	return page, more
}

// pageRoom is the most entries a page of at most max entries (max <= 0:
// every one) looks at: one more than max, which tells whether another
// follows; 0 for every one.
func pageRoom(max int) int {
	if max <= 0 {
		return 0
	}
	return max + 1
}

// accountMap and roleMap are the directory's maps as they are when
// called, for pageOf, which may read them after it gave the lock back.
func (d *directory) accountMap() map[string]*Account { return d.accounts }

func (d *directory) roleMap() map[string]*Role { return d.roles }

// resetPages tells the indexes of the pages (pageOf) that the maps of
// accounts and roles were replaced whole. d.mu is held for writing.
func (d *directory) resetPages() {
	d.accountIndex.Reset()
	d.roleIndex.Reset()
}

// accountJSONLen is len(json.Marshal(a)), counted without encoding a:
// what a page of accounts holds to MaxPageBytes (pageOf).
func accountJSONLen(a *Account) int {
	n := len(`{"id":,"roles":,"createdAt":}`) + jsontext.StringLen(a.ID) + listJSONLen(a.Roles) + timeJSONLen(a.CreatedAt)
	if len(a.Attributes) > 0 {
		n += len(`,"attributes":{}`) + len(a.Attributes) - 1
		for k, v := range a.Attributes {
			n += jsontext.StringLen(k) + len(":") + jsontext.StringLen(v)
		}
	}
	if len(a.Keys) > 0 {
		n += len(`,"keys":[]`) + len(a.Keys) - 1
		for i := range a.Keys {
			n += keyJSONLen(&a.Keys[i])
		}
	}
	return n
}

// keyJSONLen is len(json.Marshal(k)), counted without encoding k.
func keyJSONLen(k *PublicKey) int {
	n := len(`{"kid":,"use":,"alg":,"key":}`) + jsontext.StringLen(k.KID) + jsontext.StringLen(k.Use) +
		jsontext.StringLen(k.Alg) + jsontext.StringLen(k.Key)
	if !k.NotBefore.IsZero() {
		n += len(`,"notBefore":`) + timeJSONLen(k.NotBefore)
	}
	if !k.NotAfter.IsZero() {
		n += len(`,"notAfter":`) + timeJSONLen(k.NotAfter)
	}
	return n
}

// roleJSONLen is len(json.Marshal(r)), counted without encoding r: what
// a page of roles holds to MaxPageBytes (pageOf).
func roleJSONLen(r *Role) int {
	n := len(`{"name":,"permissions":}`) + jsontext.StringLen(r.Name)
	if r.Permissions == nil {
		return n + len("null")
	}
	n += len("[]") + max(len(r.Permissions)-1, 0)
	for _, p := range r.Permissions {
		n += len(`{"subject":,"operations":}`) + jsontext.StringLen(p.Subject) + listJSONLen(p.Operations)
		if p.Selector != "" {
			n += len(`,"selector":`) + jsontext.StringLen(p.Selector)
		}
	}
	return n
}

// listJSONLen is len(json.Marshal(l)) for a list of strings: null when
// it is nil.
func listJSONLen[S ~string](l []S) int {
	if l == nil {
		return len("null")
	}
	n := len("[]") + max(len(l)-1, 0)
	for _, s := range l {
		n += jsontext.StringLen(string(s))
	}
	return n
}

// timeJSONLen is len(json.Marshal(t)): RFC 3339 with the nanoseconds
// that are not zero, quoted.
func timeJSONLen(t time.Time) int {
	var b [64]byte
	return len(t.AppendFormat(b[:0], time.RFC3339Nano)) + len(`""`)
}
