package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/wal"
)

// pigeon subject purge NAME against a running serve whose store holds
// messages of subjects its catalog does not have: a caller without the
// role admin and a subject of the catalog are refused with the typed
// error (code and JSON body on stderr, exit 1), each refusal audited as
// purge.denied; an admin's purge prints how many went, the name
// path-escaped (a '/', '?' or '#' in it reaches the server as part of
// the name); a missing name is a usage error (exit 2).
func TestSubjectPurge(t *testing.T) {
	t.Setenv("PIGEON_TOKEN", "") // "no credential" sends none
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "data")
	const odd = "retired/events?v=1#2" // a subject an old policy could have named
	st, err := wal.Open(data, nil)
	require.NoError(t, err)
	for i, subject := range []string{"retired.events", "retired.events", odd} {
		_, _, err := st.Append(ctx, store.Message{Subject: subject, ID: "msg_" + string(rune('a'+i)), Time: time.Now(), Body: []byte("{}")})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close(ctx))
	r := startServe(t, serveConfig{data: data})

	for _, tc := range []struct {
		name   string
		args   []string
		exit   int
		code   pigeon.Code // of a refusal
		stdout string      // of a purge
	}{
		{name: "no role", args: []string{"retired.events", "--token", "orders-token"}, exit: 1, code: pigeon.CodeForbidden},
		{name: "no credential", args: []string{"retired.events"}, exit: 1, code: pigeon.CodeUnauthenticated},
		{name: "in the catalog", args: []string{"--token", "admin-token", "payments.authorize"}, exit: 1, code: pigeon.CodeConflict},
		{name: "no name", args: []string{"--token", "admin-token"}, exit: 2},
		{name: "two names", args: []string{"a.b", "c.d", "--token", "admin-token"}, exit: 2},
		{name: "escaped", args: []string{odd, "--token", "admin-token"}, stdout: "pigeon subject purge: 1 message of " + odd + " purged\n"},
		{name: "purge", args: []string{"retired.events", "--token", "admin-token"}, stdout: "pigeon subject purge: 2 messages of retired.events purged\n"},
		{name: "again", args: []string{"retired.events", "--token", "admin-token"}, stdout: "pigeon subject purge: 0 messages of retired.events purged\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exit, stdout, stderr := r.pigeon(t, ctx, append([]string{"subject", "purge"}, tc.args...)...)
			require.Equal(t, tc.exit, exit, stderr)
			require.Equal(t, tc.stdout, stdout)
			if tc.code == "" {
				return
			}
			lines := strings.SplitN(stderr, "\n", 2)
			require.Equal(t, "pigeon subject purge: "+string(tc.code), lines[0])
			var body struct {
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.Unmarshal([]byte(lines[1]), &body), stderr)
			require.Equal(t, string(tc.code), body.Error.Code)
			require.NotEmpty(t, body.Error.Message)
		})
	}

	// The refusals of a caller the server knows are in the audit log.
	exit, stdout, stderr := r.pigeon(t, ctx, "audit", "tail", "--token", "auditor-token")
	require.Equal(t, 0, exit, stderr)
	// The route refuses a caller without the role; the engine, a purge of
	// a subject of the catalog.
	type denial struct{ Type, Principal, Subject, Ref, Code string }
	var denied []denial
	for line := range strings.Lines(stdout) {
		var rec pigeon.AuditRecord
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Type == string(pigeon.EventPurgeDenied) || rec.Type == string(pigeon.EventAccessDenied) {
			denied = append(denied, denial{rec.Type, rec.Principal, rec.Subject, rec.Ref, rec.Code})
		}
	}
	require.Equal(t, []denial{
		{string(pigeon.EventAccessDenied), demo.Orders, "", "DELETE /v1/subjects/{name}/messages", string(pigeon.CodeForbidden)},
		{string(pigeon.EventPurgeDenied), demo.Administrator, "payments.authorize", "", string(pigeon.CodeConflict)},
	}, denied)
}
