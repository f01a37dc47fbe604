package natsbridge

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// An Out route may not publish on NATS's reply inboxes: "_INBOX." was
// refused, but not the prefix a caller's connection replaces it with
// (nats.CustomInboxPrefix), where the bridge's own requests (its PubAcks,
// its read-backs) are answered, so Pigeon's publishers could answer them.
func TestOutToACustomInboxIsRefused(t *testing.T) {
	ns := runNATS(t, -1, "")
	nc, err := nats.Connect(ns.ClientURL(), append(ConnectOptions(), nats.CustomInboxPrefix("_PRIV"))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	for _, tt := range []struct {
		subject string
		ok      bool
	}{
		{"_PRIV.abc", false},
		{"_PRIV.abc.def", false},
		{"_INBOX.abc", false},
		{"_PRIVATE.abc", true},
		{"orders._PRIV", true},
	} {
		t.Run(tt.subject, func(t *testing.T) {
			_, err := New(Options{Dialer: transports[0].dialer(t, newEngine(t)), Credential: bridgeToken, NATS: nc, Routes: []Route{
				{Name: "o", Direction: Out, Subject: ordersSubject, NATSSubject: tt.subject},
			}})
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.Equal(t, pigeon.CodeInvalidArgument, code(t, err))
			require.ErrorContains(t, err, `route "o": NATSSubject`)
		})
	}
}
