package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestStoreBannerIsPrintable: serve's banner names the store as its Store
// says it (a cluster's URLs, a node's name: pigeon-cluster's text, from
// its flags), terminal-safe as every other line serve prints. Before, it
// was printed raw.
func TestStoreBannerIsPrintable(t *testing.T) {
	var b strings.Builder
	banner(&b, "127.0.0.1:8787", serveConfig{}, false, &pigeon.Catalog{}, nil, "node n of cluster nats://h/\x1b[2J\u009b\u202e", "")
	require.Equal(t, -1, strings.IndexFunc(strings.ReplaceAll(b.String(), "\n", ""), pigeon.IsControlRune), b.String())
	require.Contains(t, b.String(), `pigeon: store: node n of cluster nats://h/\x1b[2J\u009b\u202e`)
}
