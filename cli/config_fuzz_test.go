package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzLoadConfig: any file either configures serve with values that keep
// the settings' own rules, or is refused with a reason naming the file;
// nothing panics.
func FuzzLoadConfig(f *testing.F) {
	for _, seed := range []string{
		"addr: 127.0.0.1:9000\nsync: always\n",
		"tls:\n  cert: a.pem\n  key: b.pem\nmtls:\n  client_ca: [ca.pem]\n  trust_domains: [example.org, {name: b.org, ca: [b.pem]}]\n  mode: optional\n",
		"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [pigeon]\n      algorithms: [RS256]\n",
		"allowed_origins: [app.example.com, \"https://*.example.com\"]\nauth:\n  order: [mtls, token]\n",
		"shutdown_timeout: -1s\n", "sync: sometimes\n", "addr: [1, 2\n", "tls: {cert: a}\n", "", "---\n...\n",
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body string) {
		path := filepath.Join(dir, "pigeon.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		var cfg serveConfig
		if err := loadConfig(path, &cfg); err != nil {
			require.True(t, strings.HasPrefix(err.Error(), path) || strings.HasPrefix(err.Error(), "config"), "%v", err)
			return
		}
		require.Contains(t, []string{"", "batch", "always", "none"}, cfg.sync)
		require.Equal(t, cfg.tlsCert == "", cfg.tlsKey == "", "cert and key come together")
		require.Contains(t, []string{"", "required", "optional"}, cfg.mtlsMode)
		require.GreaterOrEqual(t, cfg.shutdownTimeout, 0*cfg.shutdownTimeout)
		for _, o := range cfg.allowedOrigins {
			require.NoError(t, checkOrigin(o))
		}
	})
}
