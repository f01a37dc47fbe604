package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"pigeon/cli"
	"pigeon/store/jetstream"
)

// natsStore opens a NATS JetStream cluster's store for serve and audit
// verify (cli.Store); its fields are the flags it adds.
type natsStore struct {
	prefix, creds, user, password, token, tlsCA string
	node                                        string
	replicas                                    int
	liveness, barrierTimeout                    time.Duration
}

var _ cli.Store = (*natsStore)(nil)

func (n *natsStore) Flags(fs *flag.FlagSet) {
	fs.StringVar(&n.prefix, "prefix", "PIGEON", "with --store nats://: prefix of every stream and bucket, one per Pigeon deployment")
	fs.StringVar(&n.creds, "nats-creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&n.user, "nats-user", "", "NATS user")
	fs.StringVar(&n.password, "nats-password", "", "NATS password (default $NATS_PASSWORD)")
	fs.StringVar(&n.token, "nats-token", "", "NATS token (default $NATS_TOKEN)")
	fs.StringVar(&n.tlsCA, "nats-tls-ca", "", "CA bundle (PEM) that signs the NATS servers' certificates")
	if fs.Name() == "serve" {
		fs.StringVar(&n.node, "node", "", "with --store nats://: this node's name, unique in the cluster; it names the node's audit chain (letters, digits, '-', '_')")
		fs.IntVar(&n.replicas, "replicas", 3, "with --store nats://: replicas of every stream and bucket the node creates (1, 3 or 5)")
		fs.DurationVar(&n.liveness, "liveness", 3*time.Second, "with --store nats://: how long a revocation still waits for a node that stopped confirming (a dead one)")
		fs.DurationVar(&n.barrierTimeout, "barrier-timeout", 5*time.Second, "with --store nats://: how long a revocation waits for every live node to confirm it before CLUSTER_UNCONFIRMED (the change made all the same)")
	}
}

// options are the NATS connection options the flags say.
func (n *natsStore) options() []nats.Option {
	o := []nats.Option{nats.Timeout(5 * time.Second)}
	if n.creds != "" {
		o = append(o, nats.UserCredentials(n.creds))
	}
	if n.user != "" {
		o = append(o, nats.UserInfo(n.user, orEnv(n.password, "NATS_PASSWORD")))
	}
	if t := orEnv(n.token, "NATS_TOKEN"); t != "" {
		o = append(o, nats.Token(t))
	}
	if n.tlsCA != "" {
		o = append(o, nats.RootCAs(n.tlsCA))
	}
	return o
}

func orEnv(v, env string) string {
	if v == "" {
		return os.Getenv(env)
	}
	return v
}

func (n *natsStore) Open(ctx context.Context, url string, env cli.StoreEnv) (*cli.OpenStore, error) {
	if n.node == "" {
		return nil, fmt.Errorf("%w: --node NAME is required: every node of a cluster keeps its own audit chain", cli.ErrUsage)
	}
	st, err := jetstream.Connect(ctx, url, &jetstream.Options{Prefix: n.prefix, Replicas: n.replicas, Node: n.node, Liveness: n.liveness, BarrierTimeout: n.barrierTimeout}, n.options()...)
	if err != nil {
		return nil, err
	}
	cl, err := jetstream.NewCluster(ctx, st)
	if err != nil {
		_ = st.Close(context.Background())
		return nil, err
	}
	return &cli.OpenStore{Store: st, Cluster: cl,
		Banner: fmt.Sprintf("node %s of NATS JetStream cluster %s (prefix %s, R%d)", n.node, jetstream.RedactedURLs(url), n.prefix, n.replicas)}, nil
}

func (n *natsStore) VerifyAudit(ctx context.Context, url string) ([]cli.AuditChain, error) {
	nc, err := nats.Connect(url, n.options()...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", jetstream.RedactedURLs(url), err)
	}
	defer nc.Close()
	reports, err := jetstream.VerifyAudit(ctx, nc, n.prefix)
	if err != nil {
		return nil, fmt.Errorf("listing the audit chains of %s: %w", n.prefix, err)
	}
	chains := make([]cli.AuditChain, len(reports))
	for i, r := range reports {
		chains[i] = cli.AuditChain{Node: r.Node, Records: r.Records, Err: r.Err}
	}
	return chains, nil
}
