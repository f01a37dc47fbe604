package pigeon_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
)

// storedRecord is one raw record of the directory's buckets.
type storedRecord struct{ bucket, key, value string }

// storeOf is a memory store holding records, as written to it behind the
// broker's back.
func storeOf(t *testing.T, records ...storedRecord) *memory.Store {
	t.Helper()
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	for _, r := range records {
		require.NoError(t, st.Put(ctx, r.bucket, r.key, []byte(r.value)))
	}
	return st
}

// storedAccount is the JSON of an account as the broker stores it, with
// extra members (each `"name":value`) inside it.
func storedAccount(id string, extra ...string) string {
	members := append([]string{`"id":` + quoteJSON(id), `"createdAt":"2026-11-29T12:00:00Z"`}, extra...)
	if !strings.Contains(strings.Join(extra, ","), `"roles"`) {
		members = append(members, `"roles":[]`)
	}
	return "{" + strings.Join(members, ",") + "}"
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestDirectoryLoadRefusesRecordsNoBrokerWrites: a record of the
// directory that no broker writes, or whose skipping could grant more
// than the write path allows, stops the start with STORE_CORRUPT. Before,
// the directory took each record as encoding/json read it: an account
// stored under bob naming alice replaced alice, a member spelt twice or in
// another case was read one way by the broker and another by any other
// reader, and an account the write path refuses was kept.
func TestDirectoryLoadRefusesRecordsNoBrokerWrites(t *testing.T) {
	alice := storedRecord{"accounts", "alice", storedAccount("alice")}
	manyAttrs := make([]string, pigeon.MaxAccountAttributes+1)
	for i := range manyAttrs {
		manyAttrs[i] = fmt.Sprintf(`"a%d":"v"`, i)
	}
	cases := []struct {
		name    string
		records []storedRecord
	}{
		{"an account under another id", []storedRecord{alice,
			{"accounts", "bob", storedAccount("alice", `"roles":["admin"]`)}}},
		{"a role under another name", []storedRecord{
			{"roles", "viewer", `{"name":"admin","permissions":[{"subject":"rooms.chat","operations":["publish"]}]}`}}},
		{"a grant under another jti", []storedRecord{alice,
			{"grants", "gr_1", `{"jti":"gr_2","account":"alice","roles":["admin"],"issuedAt":"2026-11-29T12:00:00Z","expiresAt":"2026-11-29T13:00:00Z"}`}}},
		{"an account with a member twice", []storedRecord{
			{"accounts", "alice", `{"id":"alice","roles":[],"roles":["admin"],"createdAt":"2026-11-29T12:00:00Z"}`}}},
		{"an account with a member in another case", []storedRecord{
			{"accounts", "alice", `{"id":"alice","Roles":["admin"],"createdAt":"2026-11-29T12:00:00Z"}`}}},
		{"an account with an id member in another case", []storedRecord{alice,
			{"accounts", "bob", `{"id":"bob","ID":"alice","roles":[],"createdAt":"2026-11-29T12:00:00Z"}`}}},
		{"a role with a member in another case", []storedRecord{
			{"roles", "member", `{"name":"member","Permissions":[{"subject":"rooms.chat","operations":["publish"]}]}`}}},
		{"a grant with a member twice", []storedRecord{alice,
			{"grants", "gr_1", `{"jti":"gr_1","account":"alice","account":"bob","roles":["admin"],"issuedAt":"2026-11-29T12:00:00Z","expiresAt":"2026-11-29T13:00:00Z"}`}}},
		{"an account that is not UTF-8", []storedRecord{
			{"accounts", "alice", storedAccount("alice", "\"attributes\":{\"team\":\"\xff\"}")}}},
		{"a revocation that does not decode", []storedRecord{
			{"grants.revoked", "gr_1", `"yesterday"`}}},
		{"an account whose id is not an id", []storedRecord{
			{"accounts", "bad id", storedAccount("bad id")}}},
		{"an account with a role name that is not an id", []storedRecord{
			{"accounts", "alice", storedAccount("alice", `"roles":["bad role"]`)}}},
		{"an account with a control character in an attribute", []storedRecord{
			{"accounts", "alice", storedAccount("alice", `"attributes":{"team":"a\u001b[2Jb"}`)}}},
		{"an account with too many attributes", []storedRecord{
			{"accounts", "alice", storedAccount("alice", `"attributes":{`+strings.Join(manyAttrs, ",")+`}`)}}},
		{"an account with no createdAt", []storedRecord{
			{"accounts", "alice", `{"id":"alice","roles":[]}`}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := storeOf(t, c.records...)
			e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Catalog: demo.Catalog(), Region: "uk"})
			if err == nil {
				_ = e.Shutdown(ctx)
			}
			requireCode(t, err, pigeon.CodeStoreCorrupt)
		})
	}
}

// TestDirectoryLoadSkipsWhatOnlyGrants: a role, a role permission or an
// account key that the write path refuses, and that an earlier broker
// may have stored under looser rules, is left out with a warning and the
// broker starts: leaving it out only takes access away. Before, a
// permission naming an unknown operation beside a known one granted the
// known one, a role with a name that is not an id was defined, and a key
// of small order, under which anyone can sign, was published.
func TestDirectoryLoadSkipsWhatOnlyGrants(t *testing.T) {
	signing := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	keys, err := json.Marshal([]pigeon.PublicKey{
		pigeon.Ed25519PublicKey("sig-weak", identityKey),
		pigeon.Ed25519PublicKey("sig-1", signing),
		pigeon.Ed25519PublicKey("sig-1", signing),
	})
	require.NoError(t, err)
	st := storeOf(t,
		storedRecord{"roles", "bad role", `{"name":"bad role","permissions":[{"subject":"rooms.chat","operations":["publish","receive"]}]}`},
		storedRecord{"roles", "member", `{"name":"member","permissions":[
			{"subject":"rooms.chat","operations":["publish","fly"]},
			{"subject":"rooms.chat\u001b","operations":["publish"]},
			{"subject":"rooms.chat","operations":[]},
			{"subject":"rooms.chat","operations":["receive"],"selector":"/room=lobby"}]}`},
		storedRecord{"accounts", carol, storedAccount(carol, `"roles":["member"]`, `"keys":`+string(keys))},
	)
	f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })

	_, err = f.e.GetRole(ctx, "bad role")
	requireCode(t, err, pigeon.CodeNotFound)
	member, err := f.e.GetRole(ctx, "member")
	require.NoError(t, err)
	require.Equal(t, []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpReceive}, Selector: "/room=lobby"}},
		member.Permissions, "only the permission PutRole would have taken is left")

	c := f.connect("carol-token", "rooms.chat")
	info := c.Contract().Info().Subjects[0]
	require.Equal(t, []pigeon.Operation{pigeon.OpReceive}, info.Operations, "the permission naming an unknown operation grants no publish")
	_, err = c.Publish(ctx, chatIn("lobby", "hello"))
	requireCode(t, err, pigeon.CodeOperationNotInContract)

	published, err := f.e.AccountKeys(ctx, carol)
	require.NoError(t, err)
	require.Equal(t, []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-1", signing)}, published,
		"the weak key and the second key of one kid are left out")
}

// TestDirectoryLoadSkipsAGrantIssueGrantWouldNotHave: a grant record whose
// expiry is further from its issue than MaxGrantTTL is not one IssueGrant
// made: the directory leaves it out, and its token is refused.
func TestDirectoryLoadSkipsAGrantIssueGrantWouldNotHave(t *testing.T) {
	st := storeOf(t)
	a := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	_, err := a.e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{
		{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = a.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	tok, err := a.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)

	b := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	_, err = b.e.Authenticate(ctx, tok.Token)
	require.NoError(t, err, "the grant as IssueGrant stored it")

	raw, err := st.Get(ctx, "grants", tok.JTI)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(raw, &rec))
	issued, err := time.Parse(time.RFC3339, rec["issuedAt"].(string))
	require.NoError(t, err)
	rec["expiresAt"] = issued.Add(pigeon.MaxGrantTTL + time.Second)
	raw, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, "grants", tok.JTI, raw))

	c := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	_, err = c.e.Authenticate(ctx, tok.Token)
	requireCode(t, err, pigeon.CodeUnauthenticated)
}
