package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestRenegotiateAfterRevocation: a connection authenticated once, at its
// upgrade, with a grant token cannot negotiate a fresh contract on that
// connection once the grant is revoked: the new contract would otherwise
// run under a credential that no longer admits anyone.
func TestRenegotiateAfterRevocation(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	_, err := v.e.PutRole(ctx, pigeon.Role{Name: "notifier", Permissions: []pigeon.Permission{
		{Subject: "notifications.send", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = v.e.CreateAccount(ctx, pigeon.Account{ID: "ws-grantee", Roles: []string{"notifier"}})
	require.NoError(t, err)
	g, err := v.e.IssueGrant(ctx, "ws-grantee", []string{"notifier"}, time.Hour)
	require.NoError(t, err)

	r := v.raw(t, g.Token)
	info := r.negotiate("notifications.send")
	require.Contains(t, info.Subjects[0].Operations, pigeon.OpPublish)

	require.NoError(t, v.e.RevokeGrant(ctx, g.JTI))
	r.fail(ws.OpNegotiate, `,"subjects":["notifications.send"]`, pigeon.CodeGrantRevoked)
	r.fail(ws.OpPublish, `,"message":{"type":"notification.send.requested","subject":"notifications.send","intent":"send_notification","classification":"internal","data":{"recipientId":"c","channel":"email","templateId":"t"}}`,
		pigeon.CodeGrantRevoked)
}
