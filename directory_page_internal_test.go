package pigeon

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEntryJSONLen: accountJSONLen and roleJSONLen, what a page of the
// directory counts against MaxPageBytes, are len(json.Marshal) of the
// entry to the byte: absent and empty lists, omitted members, escaped
// text (HTML characters, quotes, U+2028, text that is not UTF-8), times
// with and without nanoseconds and offsets. Every field of the types is
// counted: a field added to one of them fails the field count here until
// the count takes it in.
func TestEntryJSONLen(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("", 5*3600+30*60))
	accounts := []Account{
		{},
		{ID: "a", Roles: []string{}, Attributes: map[string]string{}, Keys: []PublicKey{}},
		{
			ID:         "spiffe://x/sa/<a>&b",
			Attributes: map[string]string{"k": "v", "<é>": "\"q\" \\ \u2028\u2029", "team": "日本"},
			Roles:      []string{"r1", "r&2"},
			Keys: []PublicKey{
				{KID: "k1", Use: "sig", Alg: "EdDSA", Key: "abc"},
				{KID: "k2", NotBefore: at, NotAfter: at.Add(time.Hour)},
				{KID: "k3", NotAfter: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
			},
			CreatedAt: at,
		},
		{ID: "not utf-8 \xff\xe2\x80", Attributes: map[string]string{"x\xfe": "\xc3"}, CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, a := range accounts {
		b, err := json.Marshal(a)
		require.NoError(t, err)
		require.Equal(t, len(b), accountJSONLen(&a), "%s", b)
	}
	roles := []Role{
		{},
		{Name: "r", Permissions: []Permission{}},
		{Name: "r<>", Permissions: []Permission{
			{},
			{Subject: "s", Operations: []Operation{OpPublish, OpReceive}, Selector: `data.x == "<y>"`},
			{Subject: "t\u2028", Operations: []Operation{}},
		}},
	}
	for _, r := range roles {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.Equal(t, len(b), roleJSONLen(&r), "%s", b)
	}
	for typ, fields := range map[reflect.Type]int{
		reflect.TypeFor[Account]():    5,
		reflect.TypeFor[PublicKey]():  6,
		reflect.TypeFor[Role]():       2,
		reflect.TypeFor[Permission](): 3,
	} {
		require.Equal(t, fields, typ.NumField(), "%s: a field added is counted by accountJSONLen, keyJSONLen or roleJSONLen too", typ)
	}
}
