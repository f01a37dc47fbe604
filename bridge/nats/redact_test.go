package natsbridge

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A token or password written into a NATS URL without escaping its '/',
// '?' or '#' (a base64 token holds '/' and '+') is not userinfo to a URL
// parser: it reads a host, then a path, a query or a fragment holding the
// rest of the secret, and the URL was shown as it was, secret and all.
func TestRedactURLSecretsWithReservedCharacters(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"nats://s3cret/tok+en==@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://s3cret?tok@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://s3cret#tok@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://alice:pw#s3cret@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://alice:pw?s3cret@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://alice:p@s3cret@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"s3cret/tok@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://h1:4222, nats://a:s3cret/x@h2:4222", "nats://h1:4222,nats://REDACTED@h2:4222"},
		{"nats://alice:s3cret@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"tls://demo.nats.io:4443", "tls://demo.nats.io:4443"},
		{"nats://alice:s3cret@[::1", "<invalid URL>"},
	} {
		got := RedactURL(tt.in)
		require.NotContains(t, got, "s3cret", tt.in)
		require.NotContains(t, got, "tok", tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}
