package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
	"pigeon/store/memory"
)

// fakeStore is a Store for fake:// URLs with a flag of its own; it opens
// an in-memory store.
type fakeStore struct {
	node   string
	opened string // the URL Open was given
	chains []AuditChain
}

func (f *fakeStore) Flags(fs *flag.FlagSet) {
	fs.StringVar(&f.node, "fake-node", "", "the node")
}

func (f *fakeStore) Open(_ context.Context, url string, env StoreEnv) (*OpenStore, error) {
	if f.node == "" {
		return nil, fmt.Errorf("%w: --fake-node is required", ErrUsage)
	}
	if env.Logger == nil {
		return nil, errors.New("no logger")
	}
	f.opened = url
	return &OpenStore{Store: memory.New(nil), Banner: "fake node " + f.node}, nil
}

func (f *fakeStore) VerifyAudit(_ context.Context, url string) ([]AuditChain, error) {
	if url != "fake://a" {
		return nil, errors.New("no such fake")
	}
	return f.chains, nil
}

// A WithStore store opens --store URLs of its scheme with its own flags,
// for serve and audit verify; an error of its flags is a usage error.
func TestWithStore(t *testing.T) {
	f := &fakeStore{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &testlog.Buffer{}, &testlog.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--store", "fake://a", "--fake-node", "n1", "--addr", "127.0.0.1:0", "--shutdown-timeout", "10s"},
			out, errOut, WithStore(f, "fake"))
	}()
	health := regexp.MustCompile(`health\s+(http://127\.0\.0\.1:\d+)/health`)
	waitFor(t, "the banner", func() bool { return health.MatchString(out.String()) })
	require.Contains(t, out.String(), "store: fake node n1")
	cancel()
	require.Equal(t, 0, <-done, errOut.String())
	require.Equal(t, "fake://a", f.opened)

	var stdout, stderr strings.Builder
	code := Main(context.Background(), []string{"serve", "--store", "fake://a", "--addr", "127.0.0.1:0"}, &stdout, &stderr, WithStore(&fakeStore{}, "fake"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "--fake-node is required")

	stdout.Reset()
	stderr.Reset()
	f = &fakeStore{chains: []AuditChain{{Node: "a", Records: 3}, {Node: "b", Records: 1, Err: errors.New("broken link")}}}
	code = Main(context.Background(), []string{"audit", "verify", "--store", "fake://a", "--fake-node", "x"}, &stdout, &stderr, WithStore(f, "fake"))
	require.Equal(t, 1, code)
	require.Equal(t, "pigeon audit verify: the audit chain of node a holds: 3 records\n", stdout.String())
	require.Contains(t, stderr.String(), "the audit chain of node b does not hold: broken link (1 records verified before it)")

	stderr.Reset()
	code = Main(context.Background(), []string{"audit", "verify", "--store", "other://a"}, &stdout, &stderr, WithStore(f, "fake"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), `--store must be wal`)
}
