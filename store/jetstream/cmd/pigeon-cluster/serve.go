package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"pigeon"
	"pigeon/demo"
	"pigeon/policy"
	"pigeon/server"
	"pigeon/store/jetstream"
)

type serveConfig struct {
	natsFlags
	node, addr, policies, tokens, region string
	replicas                             int
	shutdownTimeout                      time.Duration
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c serveConfig
	c.register(fs)
	fs.StringVar(&c.node, "node", "", "this node's name, unique in the cluster: it names the node's audit chain (letters, digits, '-', '_')")
	fs.IntVar(&c.replicas, "replicas", 3, "replicas of every stream and bucket the node creates (1, 3 or 5)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8787", "address to listen on")
	fs.StringVar(&c.policies, "policies", "", "policy directory (subjects/ and schemas/); without it the demo catalog is served")
	fs.StringVar(&c.tokens, "tokens", "", "bearer tokens file, YAML or JSON (required with --policies)")
	fs.StringVar(&c.region, "region", "uk", "default region of a request or connection that names none")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a shutdown waits for work in flight")
	if code, ok := parse(fs, args, &c.natsFlags, stderr); !ok {
		return code
	}
	if c.node == "" {
		fmt.Fprintln(stderr, "pigeon-cluster serve: --node NAME is required: every node of a cluster keeps its own audit chain")
		return 2
	}
	if err := serve(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "pigeon serve:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, c serveConfig, stdout, stderr io.Writer) error {
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	catalog, tokens, err := catalogAndTokens(c)
	if err != nil {
		return err
	}
	st, err := jetstream.Connect(ctx, c.url, &jetstream.Options{Prefix: c.prefix, Replicas: c.replicas, Node: c.node}, c.options()...)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	cl, err := jetstream.NewCluster(ctx, st)
	if err != nil {
		return err
	}
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Cluster: cl, Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog: catalog, Region: c.region, Logger: logger})
	if err != nil {
		return err
	}
	srv := server.New(e, &server.Options{Region: c.region, Logger: logger})
	l, err := net.Listen("tcp", c.addr)
	if err == nil {
		fmt.Fprintf(stdout, "pigeon: node %s of cluster %s (prefix %s, R%d) serving %d subjects on http://%s\n",
			c.node, c.url, c.prefix, c.replicas, len(catalog.Subjects), l.Addr())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "pigeon: shutting down")
		case err = <-served:
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	err = errors.Join(err, srv.Shutdown(sctx), e.Shutdown(sctx))
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// catalogAndTokens loads --policies and --tokens, or the demo.
func catalogAndTokens(c serveConfig) (*pigeon.Catalog, []pigeon.StaticToken, error) {
	tokens := demo.Tokens()
	if c.tokens != "" {
		b, err := os.ReadFile(c.tokens)
		if err != nil {
			return nil, nil, err
		}
		var f struct {
			Tokens []pigeon.StaticToken `yaml:"tokens"`
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.tokens, err)
		}
		tokens = f.Tokens
	}
	if c.policies == "" {
		return demo.Catalog(), tokens, nil
	}
	if c.tokens == "" {
		return nil, nil, errors.New("--policies needs --tokens: with no tokens nobody could connect")
	}
	cat, err := policy.LoadDir(c.policies)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range policy.Lint(cat) {
		if p.IsError() {
			return nil, nil, fmt.Errorf("policy %s (run `pigeon policy lint %s` for every problem)", p, c.policies)
		}
	}
	return cat, tokens, nil
}
