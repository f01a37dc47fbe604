package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"pigeon"
	"pigeon/store"
	"pigeon/store/wal"
)

// Store opens the stores that serve's and audit verify's --store names by
// a URL of one of the schemes it was given to WithStore under: a store
// kept in its own module (a cluster's, say) plugs into the commands
// without the pigeon module importing it.
//
// Flags binds the store's own flags to its fields, so a Store value serves
// one call of Main; Main calls its methods from one goroutine.
type Store interface {
	// Flags registers the store's own flags (a node name, credentials)
	// on the flag set of serve and of audit verify. They must not be
	// named as a flag of those commands is.
	Flags(fs *flag.FlagSet)
	// Open opens the store url names, for serve. An error wrapping
	// ErrUsage ends serve with exit code 2, as a bad flag does.
	Open(ctx context.Context, url string, env StoreEnv) (*OpenStore, error)
	// VerifyAudit verifies, offline, every audit chain the store at url
	// keeps (one per node of a cluster).
	VerifyAudit(ctx context.Context, url string) ([]AuditChain, error)
}

// StoreEnv is what serve hands Store.Open.
type StoreEnv struct {
	// Logger is serve's logger (--log-format, --log-level).
	Logger *slog.Logger
}

// OpenStore is a store Store.Open opened. Serve closes Store when it
// stops, after the engine.
type OpenStore struct {
	Store store.Store
	// Cluster, when not nil, is how the engine works with the other nodes
	// sharing Store (pigeon.Options.Cluster).
	Cluster pigeon.Cluster
	// Banner says what the store is, in serve's banner.
	Banner string
}

// AuditChain is one audit chain's verification.
type AuditChain struct {
	Node    string // the node that keeps the chain
	Records uint64 // how many records hold (before Err, if any)
	Err     error  // why the chain does not hold; nil when it does
}

// ErrUsage marks a Store's error caused by its flags (exit code 2).
var ErrUsage = errors.New("invalid flags")

// Option configures Main.
type Option func(*options)

// WithStore makes --store URLs of the given schemes ("nats" for
// nats://host:4222) open with s.
func WithStore(s Store, schemes ...string) Option {
	return func(o *options) {
		if o.stores == nil {
			o.stores = map[string]Store{}
		}
		for _, sc := range schemes {
			o.stores[sc] = s
		}
		o.kinds = append(o.kinds, s)
	}
}

// options are Main's options; a nil *options has none.
type options struct {
	stores map[string]Store // by URL scheme
	kinds  []Store          // each once, in the order given
}

// storeFor returns the Store that opens url, or nil.
func (o *options) storeFor(url string) Store {
	scheme, _, ok := strings.Cut(url, "://")
	if o == nil || !ok {
		return nil
	}
	return o.stores[scheme]
}

// flags registers every Store's flags on fs.
func (o *options) flags(fs *flag.FlagSet) {
	if o == nil {
		return
	}
	for _, s := range o.kinds {
		s.Flags(fs)
	}
}

// openStore opens the store cfg names: a Store's, or --data's write-ahead
// log, or none (memory) when --data is "".
func openStore(ctx context.Context, cfg serveConfig, logger *slog.Logger) (*OpenStore, error) {
	mode, err := syncMode(cfg.sync)
	if err != nil {
		return nil, err
	}
	if cfg.store != "" && cfg.store != "wal" {
		s := cfg.opts.storeFor(cfg.store)
		if s == nil {
			return nil, fmt.Errorf("--store must be wal or nats://host:port[,…], not %q", cfg.store)
		}
		return s.Open(ctx, cfg.store, StoreEnv{Logger: logger})
	}
	if cfg.data == "" {
		return &OpenStore{Banner: "in memory (nothing survives a restart)"}, nil
	}
	ws, err := wal.Open(cfg.data, &wal.Options{Sync: mode, Logger: logger, NoPreallocate: cfg.noPreallocate})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", cfg.data, err)
	}
	return &OpenStore{Store: ws, Banner: fmt.Sprintf("%s (write-ahead log, sync %s)", cfg.data, cfg.sync)}, nil
}

// verifyStore verifies the audit chains of the store at url with s.
func verifyStore(ctx context.Context, s Store, url string, stdout, stderr io.Writer) int {
	chains, err := s.VerifyAudit(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon audit verify: %s\n", printable(err.Error()))
		return 1
	}
	if len(chains) == 0 {
		fmt.Fprintf(stderr, "pigeon audit verify: no audit chain in %s\n", printable(url))
		return 1
	}
	code := 0
	for _, c := range chains {
		if c.Err != nil {
			fmt.Fprintf(stderr, "pigeon audit verify: the audit chain of node %s does not hold: %s (%d records verified before it)\n", printable(c.Node), printable(c.Err.Error()), c.Records)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "pigeon audit verify: the audit chain of node %s holds: %d records\n", printable(c.Node), c.Records)
	}
	return code
}

// syncMode reads --sync.
func syncMode(s string) (wal.SyncMode, error) {
	switch s {
	case "batch":
		return wal.SyncBatch, nil
	case "always":
		return wal.SyncAlways, nil
	case "none":
		return wal.SyncNone, nil
	}
	return 0, fmt.Errorf("--sync must be batch, always or none, not %q", s)
}
