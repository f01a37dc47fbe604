package pigeon_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// importRule says what one package (or a family of packages, with a
// trailing "/...") may not import. Module packages are named by their path
// ("pigeon/store/wal"); a trailing "/..." matches the package and every one
// below it. leaf forbids every module package but those in allow.
type importRule struct {
	pkg    string
	deny   []string
	leaf   bool
	allow  []string
	reason string
}

// importRules is the layout the code keeps (docs/architecture.md): the root
// holds the broker's concepts and imports no concrete store but its
// in-memory default, no transport, no server and no HTTP; stores import no
// broker; only cli (the command line, as a library) wires concrete parts
// together, and cmd/ is a thin main over it.
var importRules = []importRule{
	{pkg: "pigeon", deny: []string{"pigeon/store/wal/...", "pigeon/transport/...", "pigeon/server/...", "pigeon/internal/wire", "pigeon/cli/...", "pigeon/cmd/...", "net/http", "gopkg.in/yaml.v3", "go.yaml.in/yaml/...",
		"pigeon/identity", "github.com/go-jose/...", "github.com/spiffe/...", "pigeon/programs/...", "github.com/tetratelabs/...", "pigeon/metrics", "github.com/prometheus/..."},
		reason: "the root holds the concepts: no concrete store beyond memory, no transport, no server, no HTTP, no YAML, no JOSE or SPIFFE code, no WebAssembly runtime, no metrics library (Observer is the seam)"},
	{pkg: "pigeon/policy", leaf: true, allow: []string{"pigeon/internal/cond", "pigeon/internal/datapath", "pigeon/internal/schema", "pigeon/internal/jsontext", "pigeon/internal/yamlnum", "pigeon/internal/regfile", "pigeon/internal/textrule"},
		reason: "policy is a leaf the broker imports: types, loading, lint"},
	{pkg: "pigeon/store", leaf: true, reason: "the store seam knows no broker"},
	{pkg: "pigeon/store/memory", leaf: true, allow: []string{"pigeon/store", "pigeon/internal/hashtab"}, reason: "a store knows records, not the broker"},
	{pkg: "pigeon/store/wal/...", leaf: true, allow: []string{"pigeon/store", "pigeon/store/wal/...", "pigeon/internal/hashtab", "pigeon/internal/regfile"}, reason: "a store knows records, not the broker"},
	{pkg: "pigeon/store/storetest", leaf: true, allow: []string{"pigeon/store"}, reason: "the store suite tests the seam alone"},
	{pkg: "pigeon/transport/inproc", deny: []string{"pigeon/store/...", "pigeon/server/...", "pigeon/transport/ws"}, reason: "a transport carries sessions"},
	{pkg: "pigeon/transport/ws", deny: []string{"pigeon/store/...", "pigeon/server/...", "pigeon/policy", "pigeon/identity", "github.com/go-jose/..."}, reason: "a transport carries sessions"},
	{pkg: "pigeon/transport/transporttest", deny: []string{"pigeon/store/wal/...", "pigeon/transport/ws", "pigeon/transport/inproc"}, reason: "the session suite runs against any transport"},
	{pkg: "pigeon/transport/mesgd", deny: []string{"pigeon/store/...", "pigeon/server/...", "pigeon/policy", "pigeon/identity", "pigeon/programs/..."}, reason: "a transport carries sessions"},
	{pkg: "pigeon/programs", deny: []string{"pigeon/store/wal/...", "pigeon/transport/...", "pigeon/server/...", "pigeon/internal/...", "pigeon/identity", "net/http"},
		reason: "programs run on the engine's public API and a KV; the server and cmd/ wire them"},
	{pkg: "pigeon/programs/guest", leaf: true, reason: "the guest SDK is compiled into programs: it needs nothing of the broker"},
	{pkg: "pigeon/server", deny: []string{"pigeon/store/...", "pigeon/identity"}, reason: "the server serves an engine; cmd/ picks the store and the authenticators"},
	{pkg: "pigeon/internal/wire", deny: []string{"pigeon/transport/...", "pigeon/server/..."}, reason: "the wire form of errors is below transports and the server"},
	{pkg: "pigeon/internal/jsontext", leaf: true, reason: "a leaf"},
	{pkg: "pigeon/internal/schema", leaf: true, allow: []string{"pigeon/internal/jsontext"}, reason: "a leaf but for the strict JSON check"},
	{pkg: "pigeon/internal/cond", leaf: true, allow: []string{"pigeon/internal/jsontext"}, reason: "a leaf but for the exact-number rule"},
	{pkg: "pigeon/internal/datapath", leaf: true, allow: []string{"pigeon/internal/jsontext"}, reason: "a leaf but for the flat form of decoded data"},
	{pkg: "pigeon/internal/predecoded", leaf: true, allow: []string{"pigeon/internal/datapath", "pigeon/internal/jsontext"}, reason: "a message's decoded data, below the engine and the transports"},
	{pkg: "pigeon/internal/grant", leaf: true, reason: "a leaf"},
	{pkg: "pigeon/internal/hashtab", leaf: true, reason: "a leaf"},
	{pkg: "pigeon/internal/logctx", leaf: true, reason: "a leaf"},
	{pkg: "pigeon/internal/yamlnum", leaf: true, reason: "a leaf"},
	{pkg: "pigeon/internal/regfile", leaf: true, reason: "a leaf"},
	{pkg: "pigeon/internal/textrule", leaf: true, reason: "a leaf: the one rule of the characters no name holds, read by the root and by policy"},
	{pkg: "pigeon/internal/firstn", leaf: true, reason: "a leaf: the first n of a set by a key, kept without sorting the set"},
	{pkg: "pigeon/internal/sortedkeys", leaf: true, allow: []string{"pigeon/internal/firstn"}, reason: "a leaf: a map's keys kept in order for paging"},
	{pkg: "pigeon/docs", leaf: true, reason: "embedded documents"},
	{pkg: "pigeon/seal", leaf: true, reason: "sealing needs nothing of the broker"},
	{pkg: "pigeon/demo", deny: []string{"pigeon/store/...", "pigeon/transport/...", "pigeon/server/..."}, reason: "the demo catalog is data"},
	{pkg: "pigeon/examples/...", deny: []string{"pigeon/internal/..."}, reason: "examples use the public API only"},
	{pkg: "pigeon/metrics", deny: []string{"pigeon/store/...", "pigeon/transport/...", "pigeon/server/...", "pigeon/internal/..."},
		reason: "metrics observe the engine through its public Observer seam; cmd/ wires the connection count"},
	{pkg: "pigeon/cmd/...", leaf: true, allow: []string{"pigeon/cli"},
		reason: "cmd/ is a thin wrapper: its main calls cli.Main, where the commands live"},
	{pkg: "pigeon/identity", deny: []string{"pigeon/store/...", "pigeon/transport/...", "pigeon/server/...", "pigeon/policy", "pigeon/internal/..."},
		reason: "edge identity is a set of authenticators over the public Credential seam; the server and transports never import it"},
}

// matches reports whether path is pattern, or below it for "x/...".
func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return pattern == path
}

// violation returns why pkg may not import imp under r, or "".
func (r importRule) violation(pkg, imp string) string {
	if !matches(r.pkg, pkg) || imp == pkg {
		return ""
	}
	for _, d := range r.deny {
		if matches(d, imp) {
			return pkg + " imports " + imp + ": " + r.reason
		}
	}
	if r.leaf && (imp == "pigeon" || strings.HasPrefix(imp, "pigeon/")) &&
		!slices.ContainsFunc(r.allow, func(a string) bool { return matches(a, imp) }) {
		return pkg + " imports " + imp + ": " + r.reason
	}
	return ""
}

// TestImportRules checks every package's (non-test) imports against the
// rules, naming each offending import.
func TestImportRules(t *testing.T) {
	checked := map[string]bool{}
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "node_modules") {
			return filepath.SkipDir
		}
		if dir != "." {
			if _, err := filepath.Glob(filepath.Join(dir, "go.mod")); err == nil {
				if m, _ := filepath.Glob(filepath.Join(dir, "go.mod")); len(m) > 0 {
					return filepath.SkipDir // a module of its own
				}
			}
		}
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			return nil // no Go files here
		}
		pkg := "pigeon"
		if dir != "." {
			pkg += "/" + filepath.ToSlash(dir)
		}
		checked[pkg] = true
		for _, imp := range p.Imports {
			for _, r := range importRules {
				if v := r.violation(pkg, imp); v != "" {
					t.Error(v)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	for _, r := range importRules {
		found := false
		for pkg := range checked {
			found = found || matches(r.pkg, pkg)
		}
		require.True(t, found, "rule for %s names no package: the layout changed; update the rules", r.pkg)
	}
}

// TestImportRuleMatching: the rules reject what they should (a rule that
// cannot fail would prove nothing).
func TestImportRuleMatching(t *testing.T) {
	root, storeRule, walRule := importRules[0], importRules[2], importRules[4]
	require.NotEmpty(t, root.violation("pigeon", "pigeon/store/wal"))
	require.NotEmpty(t, root.violation("pigeon", "net/http"))
	require.NotEmpty(t, root.violation("pigeon", "pigeon/transport/ws"))
	require.Empty(t, root.violation("pigeon", "pigeon/store/memory"))
	require.Empty(t, root.violation("pigeon/server", "net/http"), "a rule applies to its package only")
	require.NotEmpty(t, storeRule.violation("pigeon/store", "pigeon"))
	require.Empty(t, storeRule.violation("pigeon/store", "context"))
	require.NotEmpty(t, walRule.violation("pigeon/store/wal", "pigeon"))
	require.Empty(t, walRule.violation("pigeon/store/wal", "pigeon/store"))
	require.Empty(t, walRule.violation("pigeon/store/wal/crashtest", "pigeon/store/wal"))
	i := slices.IndexFunc(importRules, func(r importRule) bool { return r.pkg == "pigeon/cmd/..." })
	require.NotEmpty(t, importRules[i].violation("pigeon/cmd/pigeon", "pigeon/server"), "cmd/ wires nothing itself")
	require.Empty(t, importRules[i].violation("pigeon/cmd/pigeon", "pigeon/cli"))
	require.NotEmpty(t, root.violation("pigeon", "pigeon/cli"))
}
