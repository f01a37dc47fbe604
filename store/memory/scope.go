package memory

import "strings"

// keyScopes numbers the scopes of the idempotency keys a store holds, so
// that a message keeps its key's scope as a number and only the rest of the
// key in its chunk.
//
// The broker scopes a client's key by subject and principal (subject, NUL,
// principal, NUL, the client's key), so the keys of a subject's messages
// mostly start with the same few dozen bytes. A key's scope is its bytes up
// to and including its second NUL byte. A key with fewer than two NULs, one
// whose scope is longer than maxScopeLen, and one whose scope would be the
// table's maxScopes+1-th are kept whole (scope 0, ""). The table keeps each
// scope until the store is closed: at most maxScopes of maxScopeLen bytes.
type keyScopes struct {
	// strs are the scopes, numbered by their index; strs[0] is "".
	strs []string
	ids  map[string]uint32
	// max is how many scopes the table takes: maxScopes (tests lower it).
	max int
}

const (
	maxScopes   = 1 << 14
	maxScopeLen = 256
)

func (t *keyScopes) init() {
	t.strs = []string{""}
	t.ids = make(map[string]uint32)
	t.max = maxScopes
}

// split returns the number of key's scope and the rest of key. last is the
// scope the log's previous key had, tried first; split sets it to the one
// it returns when that is not 0.
func (t *keyScopes) split(key string, last *uint32) (scope uint32, rest string) {
	if *last != 0 {
		// A scope ends with its second NUL: a key that starts with it has
		// that scope.
		if p := t.strs[*last]; strings.HasPrefix(key, p) {
			return *last, key[len(p):]
		}
	}
	i := strings.IndexByte(key, 0)
	if i < 0 {
		return 0, key
	}
	j := strings.IndexByte(key[i+1:], 0)
	if j < 0 || i+j+2 > maxScopeLen {
		return 0, key
	}
	n := i + j + 2
	scope, ok := t.ids[key[:n]]
	if !ok {
		if len(t.strs) > t.max {
			return 0, key
		}
		scope = uint32(len(t.strs))
		s := strings.Clone(key[:n]) // not the caller's, which may hold more
		t.strs = append(t.strs, s)
		t.ids[s] = scope
	}
	*last = scope
	return scope, key[n:]
}
