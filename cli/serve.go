package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/identity"
	"pigeon/policy"
	"pigeon/programs"
	"pigeon/server"
	"pigeon/store"
	"pigeon/transport/mesgd"
	"pigeon/transport/ws"
)

// serveConfig is what the serve flags (and the --config file) say.
type serveConfig struct {
	addr, data, policies, tokens, region, sync string
	store                                      string // "wal" (default), a WithStore URL; else nats:// is handed to pigeon-cluster
	shutdownTimeout                            time.Duration
	verbose                                    bool
	// mesgdSubject, when set, serves mesgd's WebSocket format at
	// /mesgd/<route path> on that subject.
	mesgdSubject string
	// wsPublishRate is how many messages a second one WebSocket
	// connection may publish (0: ws.DefaultPublishRate; negative: no
	// limit).
	wsPublishRate float64
	// maxSubs is pigeon.Options.MaxSubscriptionsPerPrincipal (0: its
	// default; negative: no cap).
	maxSubs int
	// maxGroups is pigeon.Options.MaxGroupsPerSubject (0: its default;
	// negative: no cap).
	maxGroups int
	// maxStoredGroups is pigeon.Options.MaxStoredGroupsPerSubject (0: its
	// default; negative: no cap).
	maxStoredGroups int
	// maxAccounts, maxRoles and maxGrants are pigeon.Options.MaxAccounts,
	// MaxRoles and MaxGrantsPerAccount, the directory's quotas (0: their
	// defaults; negative: no quota).
	maxAccounts, maxRoles, maxGrants int
	// maxConns and maxConnsPerIP are server.Options.MaxConnections (0:
	// its default; negative: no cap) and MaxConnectionsPerIP (0: no cap).
	maxConns, maxConnsPerIP int
	// programVersions is how many versions of a program keep their
	// module for rollbacks (0: programs.DefaultKeepVersions).
	programVersions int
	// maxPrograms is programs.Options.MaxProgramsPerAccount (0: its
	// default; negative: no cap).
	maxPrograms int
	// maxProgramMemMB is programs.Options.MaxMemoryPerAccount in MiB (0:
	// its default; negative: no cap).
	maxProgramMemMB int64
	// programMaxHops, programMaxDescendants and programLineage are
	// programs.Options.MaxHops, MaxDescendants (0: their defaults;
	// negative: no bound) and LineageSize (0: its default).
	programMaxHops        int
	programMaxDescendants int64
	programLineage        int
	// noPreallocate is wal.Options.NoPreallocate.
	noPreallocate bool
	// maxReadMemMB is server.Options.MaxReadBytesInFlight in MiB (0: its
	// default; negative: no bound).
	maxReadMemMB int64
	// maxReadShareMB is server.Options.MaxReadBytesPerPrincipal in MiB
	// (0: its default, a quarter of maxReadMemMB; negative: no share).
	maxReadShareMB int64
	// Operations (docs/operations.md): log format and level, and where
	// /metrics is served ("" on the main listener).
	logFormat, logLevel, metricsAddr string
	// metricsTokenFile, when set, holds the bearer token /metrics
	// requires (server.RequireBearer); "": /metrics needs none.
	metricsTokenFile string
	// config is the --config file it was read from, if any.
	config string
	// Edge identity (docs/identity.md): TLS, mTLS, OIDC issuers, the
	// order of the methods and the per-address failure limit.
	tlsCert, tlsKey        string
	clientCA, trustDomains []string
	domainCA               map[string][]string // a trust domain's own bundle (config file); others use clientCA
	mtlsMode               string              // required (default) or optional
	issuers                []identity.Issuer
	authOrder              []string
	maxFailures            int
	failureWindow          time.Duration
	// site is how the per-source limits (the lockout, the handshake
	// limiter, --max-connections-per-ip) count the /64s of one IPv6 site
	// together (the zero value: /48s at 16 times; Bits negative: off).
	site pigeon.SiteLimit
	// allowedOrigins are the origins (host patterns) whose browser pages
	// may call the API and open the WebSocket endpoint besides the
	// server's own.
	allowedOrigins []string
	// allowedHosts are server.Options.AllowedHosts; empty on a loopback
	// address: server.LoopbackHosts (allowedHostsFor).
	allowedHosts []string
	// trustedProxies are server.Options.TrustedProxies, as text.
	trustedProxies []string
	// ready, when set, is called with the listening address.
	ready func(addr string)
	// opts are Main's options: the stores --store may name.
	opts *options
}

func serveCmd(ctx context.Context, o *options, args []string, stdout, stderr io.Writer) int {
	if v := storeFlag(args); o.storeFor(v) == nil && isClusterStore(v) {
		return handOff(ctx, []string{"serve"}, args, stdout, stderr)
	}
	cfg, code, ok := parseServe(args, stderr, o)
	if !ok {
		return code
	}
	if err := serve(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "pigeon serve:", printable(err.Error()))
		if errors.Is(err, ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// Environment variables of the reference broker that serve reads; a flag
// given on the command line wins over them.
const (
	envPort    = "PORT"            // the port to listen on, on 127.0.0.1
	envDataDir = "PIGEON_DATA_DIR" // the data directory
)

// parseServe reads the serve flags over the environment's defaults and,
// with --config, the file's values: a flag given on the command line wins
// over the file, which wins over the environment. When ok is false the
// command ends with code (0 for --help).
func parseServe(args []string, stderr io.Writer, o *options) (cfg serveConfig, code int, ok bool) {
	cfg = serveConfig{addr: "127.0.0.1:8787", data: "./pigeon-data", region: "uk", sync: "batch", shutdownTimeout: 30 * time.Second,
		logFormat: "text", logLevel: "info", opts: o}
	if port := os.Getenv(envPort); port != "" {
		cfg.addr = net.JoinHostPort("127.0.0.1", port)
	}
	if d := os.Getenv(envDataDir); d != "" {
		cfg.data = d
	}
	// First pass: every flag is checked, and --config found.
	first := cfg
	if code, ok := parseServeFlags(&first, args, stderr); !ok {
		return cfg, code, false
	}
	if first.config != "" {
		if err := loadConfig(first.config, &cfg); err != nil {
			fmt.Fprintln(stderr, "pigeon serve:", printable(err.Error()))
			return cfg, 2, false
		}
		// Second pass over the file's values: only the flags given change them.
		if code, ok := parseServeFlags(&cfg, args, io.Discard); !ok {
			return cfg, code, false
		}
		return cfg, 0, true
	}
	return first, 0, true
}

// parseServeFlags parses args into cfg, whose values are the defaults.
func parseServeFlags(cfg *serveConfig, args []string, stderr io.Writer) (code int, ok bool) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.config, "config", cfg.config, "configuration file (YAML, docs/identity.md): every flag's setting plus TLS, mTLS and OIDC issuers; flags override it")
	fs.StringVar(&cfg.addr, "addr", cfg.addr, "address to listen on (default 127.0.0.1:$PORT when PORT is set)")
	fs.StringVar(&cfg.data, "data", cfg.data, `data directory of the durable store, default $PIGEON_DATA_DIR when set ("" keeps everything in memory)`)
	fs.StringVar(&cfg.policies, "policies", cfg.policies, "policy directory (subjects/ and schemas/); without it the demo catalog is served")
	fs.StringVar(&cfg.tokens, "tokens", cfg.tokens, "bearer tokens file, YAML or JSON (required with --policies)")
	fs.StringVar(&cfg.region, "region", cfg.region, "default region of a request or connection that names none")
	fs.StringVar(&cfg.sync, "sync", cfg.sync, "when a write is on disk: batch (group commit), always, none")
	fs.BoolVar(&cfg.noPreallocate, "no-preallocate", cfg.noPreallocate, "do not preallocate the write-ahead log's segments ahead of their writes (on Linux they are, with written zeros, so that a sync need not write a new file size or block map; docs/storage.md)")
	fs.StringVar(&cfg.store, "store", cfg.store, "wal (the default: --data's write-ahead log) or nats://host:4222[,…] to run a node of a NATS JetStream cluster (docs/cluster.md)")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", cfg.shutdownTimeout, "how long a shutdown waits for work in flight")
	fs.StringVar(&cfg.mesgdSubject, "mesgd-subject", cfg.mesgdSubject, "serve mesgd's WebSocket format at /mesgd/<route path>, publishing to and subscribing on this subject (docs/protocol.md)")
	fs.IntVar(&cfg.maxPrograms, "max-programs", cfg.maxPrograms, "programs one account may run (default 32; negative: no cap; docs/programs.md)")
	fs.Int64Var(&cfg.maxProgramMemMB, "max-program-memory", cfg.maxProgramMemMB, "MiB the instances of one account's programs may take, maxInFlight × (memoryPages + a 144 MiB call stack) summed (default 4096; negative: no cap; docs/programs.md)")
	fs.IntVar(&cfg.programVersions, "program-versions", cfg.programVersions, "how many versions of a program keep their module, for rollbacks (default 5; docs/programs.md)")
	fs.IntVar(&cfg.programMaxHops, "program-max-hops", cfg.programMaxHops, "how many programs deep one message's descendants may go (default 8; negative: no bound; docs/programs.md)")
	fs.Int64Var(&cfg.programMaxDescendants, "program-max-descendants", cfg.programMaxDescendants, "how many messages programs may emit, in all, from one message (default 10000; negative: no bound; docs/programs.md)")
	fs.IntVar(&cfg.programLineage, "program-lineage-size", cfg.programLineage, "how many program-published messages the lineage remembers, about 200 bytes each (default 65536; docs/programs.md)")
	fs.IntVar(&cfg.maxSubs, "max-subscriptions", cfg.maxSubs, "subscriptions one principal may run at once, over all its connections (default 1000; negative: no cap; docs/security.md)")
	fs.IntVar(&cfg.maxConns, "max-connections", cfg.maxConns, "connections the server holds open at once, WebSockets included (default 16384; negative: no cap; docs/security.md)")
	fs.IntVar(&cfg.maxConnsPerIP, "max-connections-per-ip", cfg.maxConnsPerIP, "connections one remote IP address (an IPv6 /64) may hold open; a --trusted-proxy is not capped by it (default: no cap, as behind a NAT; docs/security.md)")
	fs.Int64Var(&cfg.maxReadMemMB, "max-read-memory", cfg.maxReadMemMB, "MiB the API's message reads (receive, replay) may hold at once until their answers are written (default 256; negative: no bound; docs/security.md)")
	fs.Int64Var(&cfg.maxReadShareMB, "max-read-memory-per-principal", cfg.maxReadShareMB, "MiB of --max-read-memory the reads of one principal may hold at once (default a quarter of it, at least one read's reservation; negative: no share; docs/security.md)")
	fs.IntVar(&cfg.maxGroups, "max-groups", cfg.maxGroups, "consumer groups one work-queue subject may have (default 1000; negative: no cap; docs/security.md)")
	fs.IntVar(&cfg.maxStoredGroups, "max-stored-groups", cfg.maxStoredGroups, "consumer groups whose progress the store keeps for one work-queue subject (default 10000; negative: no cap; docs/security.md)")
	fs.IntVar(&cfg.maxAccounts, "max-accounts", cfg.maxAccounts, "accounts the access directory may hold: creating one more is refused (default 1000000; negative: no quota; docs/http.md)")
	fs.IntVar(&cfg.maxRoles, "max-roles", cfg.maxRoles, "roles the access directory may hold: defining one more is refused (default 100000; negative: no quota; docs/http.md)")
	fs.IntVar(&cfg.maxGrants, "max-grants-per-account", cfg.maxGrants, "live (unexpired, unrevoked) grants one account may hold: issuing one more is refused (default 1000; negative: no quota; docs/http.md)")
	fs.Float64Var(&cfg.wsPublishRate, "ws-publish-rate", cfg.wsPublishRate, "messages a second one WebSocket connection may publish, in bursts of a tenth of it (default 1000000; negative: no limit; docs/protocol.md)")
	fs.BoolVar(&cfg.verbose, "v", cfg.verbose, "log every connection and request (method, path, status, duration) to stderr; the same as --log-level debug")
	fs.StringVar(&cfg.logFormat, "log-format", cfg.logFormat, "log format on stderr: text or json")
	fs.StringVar(&cfg.logLevel, "log-level", cfg.logLevel, "lowest level logged: debug, info, warn or error")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", cfg.metricsAddr, `serve Prometheus /metrics on this address alone (such as 127.0.0.1:9090); "" serves it on --addr`)
	fs.StringVar(&cfg.metricsTokenFile, "metrics-token-file", cfg.metricsTokenFile, "file holding a bearer token (at least 16 printable ASCII characters) that /metrics then requires, on --metrics-addr or --addr; default: /metrics needs none")
	fs.StringVar(&cfg.tlsCert, "tls-cert", cfg.tlsCert, "server certificate (PEM chain): serve HTTPS and WSS; reloaded when the file changes or on SIGHUP")
	fs.StringVar(&cfg.tlsKey, "tls-key", cfg.tlsKey, "key of the server certificate (PEM)")
	fs.Var(&listFlag{v: &cfg.clientCA}, "client-ca", "PEM bundle of the CAs that issue client certificates (SPIFFE X.509 SVIDs); repeat or comma-separate for several; read again on SIGHUP")
	fs.Var(&listFlag{v: &cfg.trustDomains}, "trust-domain", "SPIFFE trust domain whose client certificates are accepted (example.org); repeat or comma-separate")
	fs.StringVar(&cfg.mtlsMode, "mtls-mode", cfg.mtlsMode, "with --client-ca: required (every client presents a certificate; the default) or optional (a bearer token may be used instead)")
	fs.Var(&listFlag{v: &cfg.trustedProxies}, "trusted-proxy", "CIDR prefix or address of a reverse proxy or load balancer in front of the server, whose X-Forwarded-For names the client for the lockout of refused credentials and the audit log, and which --max-connections-per-ip does not cap; repeat or comma-separate (docs/security.md)")
	fs.Var(&listFlag{v: &cfg.allowedOrigins}, "allowed-origins", "origins (host patterns such as app.example.com or *.example.com:8443) whose browser pages may call the API (CORS) and open /v1/ws besides the server's own; repeat or comma-separate")
	fs.Var(&listFlag{v: &cfg.allowedHosts}, "allowed-hosts", "host names the server answers to (localhost, *.example.com), besides IP addresses: a request naming another is refused 403, as a DNS rebinding page's would be; default on a loopback --addr: localhost and *.localhost, otherwise any; repeat or comma-separate")
	fs.IntVar(&cfg.maxFailures, "max-auth-failures", cfg.maxFailures, "refused credentials one source (a remote IPv4 address, or an IPv6 /64) may present within --auth-failure-window before its attempts are refused 429 RATE_LIMITED, unchecked, for a window, and its new connections as they are accepted, before any TLS handshake (not a --trusted-proxy's); failed TLS handshakes are counted apart under the same limit (default 20; docs/security.md)")
	fs.DurationVar(&cfg.failureWindow, "auth-failure-window", cfg.failureWindow, "the window of --max-auth-failures, and how long a lockout lasts (default 1m)")
	fs.Var(sitePrefixFlag{v: &cfg.site.Bits}, "ipv6-site-prefix", "prefix length (`bits`) of the IPv6 site whose /64s --max-auth-failures, the failed-handshake limit and --max-connections-per-ip also count together, at --ipv6-site-factor times the per-source limit: 1 to 63, or 0 to count each /64 alone, for a campus or carrier NAT behind one /48 (default 48; docs/security.md)")
	fs.Var(siteFactorFlag{v: &cfg.site.Factor}, "ipv6-site-factor", "an IPv6 site's limit in per-source limits (`times`; --ipv6-site-prefix), at least 1 (default 16)")
	fs.Var(&listFlag{v: &cfg.authOrder}, "auth-order", "authentication methods in the order tried, comma-separated (default mtls,oidc,grant,token: those configured)")
	cfg.opts.flags(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err), false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pigeon serve: unexpected argument %q\n", fs.Arg(0))
		return 2, false
	}
	if cfg.programVersions < 0 {
		fmt.Fprintln(stderr, "pigeon serve: --program-versions must not be negative")
		return 2, false
	}
	if cfg.programLineage < 0 {
		fmt.Fprintln(stderr, "pigeon serve: --program-lineage-size must not be negative (0: the default, 65536)")
		return 2, false
	}
	if math.IsNaN(cfg.wsPublishRate) || math.IsInf(cfg.wsPublishRate, 0) {
		fmt.Fprintln(stderr, "pigeon serve: --ws-publish-rate must be a finite number (negative: no limit)")
		return 2, false
	}
	if cfg.shutdownTimeout < 0 {
		// As the config file's shutdown_timeout: a negative timeout would
		// give up on the work in flight at once.
		fmt.Fprintln(stderr, "pigeon serve: --shutdown-timeout must not be negative")
		return 2, false
	}
	if cfg.maxFailures < 0 || cfg.failureWindow < 0 {
		fmt.Fprintln(stderr, "pigeon serve: --max-auth-failures and --auth-failure-window must not be negative")
		return 2, false
	}
	for _, o := range cfg.allowedOrigins {
		if err := checkOrigin(o); err != nil {
			fmt.Fprintf(stderr, "pigeon serve: --allowed-origins: %v\n", err)
			return 2, false
		}
	}
	for _, h := range cfg.allowedHosts {
		if err := checkHost(h); err != nil {
			fmt.Fprintf(stderr, "pigeon serve: --allowed-hosts: %v\n", err)
			return 2, false
		}
	}
	if _, err := server.ParseTrustedProxies(cfg.trustedProxies); err != nil {
		fmt.Fprintf(stderr, "pigeon serve: --trusted-proxy: %v\n", err)
		return 2, false
	}
	return 0, true
}

// mustProxies is server.ParseTrustedProxies of a list parseServe checked.
func mustProxies(list []string) []netip.Prefix {
	p, err := server.ParseTrustedProxies(list)
	if err != nil {
		panic(err)
	}
	return p
}

// listFlag is a repeatable, comma-separated flag whose first use replaces
// the default (the config file's list) rather than adding to it.
type listFlag struct {
	v   *[]string
	set bool
}

func (f *listFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.Join(*f.v, ",")
}

func (f *listFlag) Set(s string) error {
	if !f.set {
		*f.v, f.set = nil, true
	}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*f.v = append(*f.v, p)
		}
	}
	return nil
}

// sitePrefixFlag is --ipv6-site-prefix: 1 to 63, or 0 for off, kept as
// pigeon.SiteLimit.Bits says it (negative: off; 0: the default, 48).
type sitePrefixFlag struct{ v *int }

func (f sitePrefixFlag) String() string {
	switch {
	case f.v == nil || *f.v == 0:
		return strconv.Itoa(pigeon.DefaultSiteBits)
	case *f.v < 0:
		return "0"
	}
	return strconv.Itoa(*f.v)
}

func (f sitePrefixFlag) Set(s string) error {
	n, err := sitePrefix(s)
	if err == nil {
		*f.v = n
	}
	return err
}

// sitePrefix reads an IPv6 site prefix length as --ipv6-site-prefix and
// ipv6_site_prefix take it (0: off), as pigeon.SiteLimit.Bits says it.
func sitePrefix(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case err != nil || n < 0 || n > 63:
		return 0, fmt.Errorf("%q is not an IPv6 site prefix length: 1 to 63 (a site is wider than a /64), or 0 to count each /64 alone", s)
	case n == 0:
		return -1, nil
	}
	return n, nil
}

// siteFactorFlag is --ipv6-site-factor: at least 1.
type siteFactorFlag struct{ v *int }

func (f siteFactorFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return strconv.Itoa(pigeon.DefaultSiteFactor)
	}
	return strconv.Itoa(*f.v)
}

func (f siteFactorFlag) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not an IPv6 site factor: a whole number, at least 1 (a site's limit in per-source limits)", s)
	}
	*f.v = n
	return nil
}

// parseExit is the exit code of a command whose flags did not parse: 0
// when the user asked for help, 2 otherwise.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// serve runs the broker until ctx ends, then shuts it down.
func serve(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	logger, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	obs, err := newObservation()
	if err != nil {
		return err
	}
	isDemo := cfg.policies == ""
	catalog, warnings, tokens, err := catalogAndTokens(cfg)
	if err != nil {
		return err
	}
	for _, p := range warnings {
		logger.Warn("policy: "+p.Message, "file", p.File, "subject", p.Subject, "field", p.Field)
	}
	metricsHandler, err := metricsHandlerFor(cfg, obs.handler())
	if err != nil {
		return err
	}
	for _, f := range []string{cfg.tokens, cfg.tlsKey, cfg.metricsTokenFile} {
		if mode, ok := readableByOthers(f); ok {
			logger.Warn("secret file readable by every user of this machine: chmod o-r "+f, "file", f, "mode", fmt.Sprintf("%04o", mode))
		}
	}
	edge, err := buildEdge(cfg, tokens, logger)
	if err != nil {
		return err
	}
	opened, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	st := opened.Store
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Cluster: opened.Cluster, Authenticator: edge.auth, Catalog: catalog,
		Region: cfg.region, Logger: logger, Observer: obs.observer(), MaxSubscriptionsPerPrincipal: cfg.maxSubs,
		MaxGroupsPerSubject: cfg.maxGroups, MaxStoredGroupsPerSubject: cfg.maxStoredGroups,
		MaxAccounts: cfg.maxAccounts, MaxRoles: cfg.maxRoles, MaxGrantsPerAccount: cfg.maxGrants, AuthFailureLimit: cfg.maxFailures, AuthFailureWindow: cfg.failureWindow,
		AuthFailureSite: cfg.site})
	if err != nil {
		if st != nil {
			_ = st.Close(context.Background())
		}
		return err
	}
	var kv store.KV
	if st != nil {
		kv = st
	}
	progs, err := programs.New(ctx, e, cfg.programOptions(kv, logger))
	if err != nil {
		_ = e.Shutdown(context.Background())
		if st != nil {
			_ = st.Close(context.Background())
		}
		return err
	}
	so := &server.Options{Region: cfg.region, Logger: logger, TLS: edge.tls, Programs: progs,
		AllowedOrigins: cfg.allowedOrigins, AllowedHosts: allowedHostsFor(cfg), TrustedProxies: mustProxies(cfg.trustedProxies), Feed: obs.feed, MaxConnections: cfg.maxConns, MaxConnectionsPerIP: cfg.maxConnsPerIP, ConnectionSite: cfg.site,
		MaxReadBytesInFlight: mibBytes(cfg.maxReadMemMB), MaxReadBytesPerPrincipal: mibBytes(cfg.maxReadShareMB)}
	if cfg.wsPublishRate != 0 {
		so.WebSocket = &ws.Options{PublishRate: cfg.wsPublishRate}
	}
	if cfg.mesgdSubject != "" {
		so.Mesgd = &mesgd.Options{Subject: cfg.mesgdSubject}
	}
	if cfg.metricsAddr == "" {
		so.Metrics = metricsHandler
	}
	srv := server.New(e, so)
	obs.engine, obs.srv = e, srv
	bg, stopBG := context.WithCancel(ctx)
	var bgDone sync.WaitGroup
	defer func() { stopBG(); bgDone.Wait() }()
	if edge.oidc != nil {
		bgDone.Go(func() { edge.oidc.Run(bg) })
	}
	if edge.cert != nil {
		bgDone.Go(func() { reloadOnHangup(bg, edge.cert, edge.reloadCAs, srv.Reauthenticate, logger) })
	}
	metricsURL, stopMetrics := "", func(context.Context) error { return nil }
	if cfg.metricsAddr != "" {
		metricsURL, stopMetrics, err = serveMetrics(bg, cfg.metricsAddr, metricsHandler, logger)
	}
	var l net.Listener
	if err == nil {
		l, err = net.Listen("tcp", cfg.addr)
	}
	if err == nil {
		banner(stdout, l.Addr().String(), cfg, isDemo, catalog, tokens, opened.Banner, metricsURL)
		edgeBanner(stdout, edge)
		if cfg.ready != nil {
			cfg.ready(l.Addr().String())
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "pigeon: shutting down")
		case err = <-served:
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	errs := []error{err}
	if err := srv.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("server shutdown: %w", err))
	}
	if err := progs.Close(sctx); err != nil {
		errs = append(errs, fmt.Errorf("programs close: %w", err))
	}
	if err := stopMetrics(sctx); err != nil {
		errs = append(errs, fmt.Errorf("metrics shutdown: %w", err))
	}
	if err := e.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("engine shutdown: %w", err))
	}
	if st != nil {
		if err := st.Close(sctx); err != nil {
			errs = append(errs, fmt.Errorf("store close: %w", err))
		}
	}
	err = errors.Join(errs...)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err == nil {
		fmt.Fprintln(stdout, "pigeon: stopped cleanly")
	}
	return err
}

// catalogAndTokens loads --policies (with its lint warnings) and
// --tokens, or the demo.
func catalogAndTokens(cfg serveConfig) (*pigeon.Catalog, []policy.Problem, []pigeon.StaticToken, error) {
	if cfg.policies == "" {
		tokens := demo.Tokens()
		if cfg.tokens == "" && !loopbackAddr(cfg.addr) {
			return nil, nil, nil, fmt.Errorf("%w: the demo's bearer tokens (admin-token among them) are public: "+
				"serve them on a loopback address such as 127.0.0.1:8787, not %q, or give --tokens FILE", ErrUsage, cfg.addr)
		}
		if cfg.tokens != "" {
			t, err := loadTokens(cfg.tokens)
			if err != nil {
				return nil, nil, nil, err
			}
			tokens = t
		}
		return demo.Catalog(), nil, tokens, nil
	}
	if cfg.tokens == "" {
		return nil, nil, nil, errors.New("--policies needs --tokens: with no tokens nobody could connect")
	}
	c, warnings, err := loadCatalog(cfg.policies)
	if err != nil {
		return nil, nil, nil, err
	}
	t, err := loadTokens(cfg.tokens)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, warnings, t, nil
}

// allowedHostsFor is the host names the server answers to: those given,
// or on a loopback address server.LoopbackHosts. The quickstart's broker
// listens on 127.0.0.1 with public demo tokens; a DNS rebinding page of
// any name would otherwise be served as of the broker's own origin.
func allowedHostsFor(cfg serveConfig) []string {
	if len(cfg.allowedHosts) == 0 && loopbackAddr(cfg.addr) {
		return server.LoopbackHosts
	}
	return cfg.allowedHosts
}

// checkHost checks one --allowed-hosts pattern: a host name pattern in
// the syntax of --allowed-origins (path.Match), without a port.
func checkHost(h string) error {
	if _, err := path.Match(h, ""); err != nil || strings.TrimSpace(h) != h || h == "" || strings.ContainsAny(h, ":/[]") {
		return fmt.Errorf("%q is not a host name pattern such as localhost or *.example.com (no port, no scheme)", h)
	}
	return nil
}

// loopbackAddr reports whether a listen address (host:port) takes
// connections from this machine only: a loopback IP or "localhost". An
// empty host, 0.0.0.0 and :: listen on every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// banner says what is being served and where.
func banner(w io.Writer, addr string, cfg serveConfig, isDemo bool, c *pigeon.Catalog, tokens []pigeon.StaticToken, storeBanner, metricsURL string) {
	names := make([]string, len(c.Subjects))
	for i, s := range c.Subjects {
		names[i] = printable(s.Name) // the policy files' text
	}
	if isDemo {
		fmt.Fprintf(w, "pigeon: DEMO MODE: serving the built-in demo catalog (%s)\n", strings.Join(names, ", "))
		if cfg.tokens == "" {
			toks := make([]string, len(tokens))
			for i, t := range tokens {
				toks[i] = t.Token
			}
			fmt.Fprintf(w, "pigeon: demo bearer tokens: %s\n", strings.Join(toks, ", "))
		} else {
			fmt.Fprintf(w, "pigeon: %d bearer tokens from %s\n", len(tokens), cfg.tokens)
		}
		fmt.Fprintln(w, "pigeon: not for production; pass --policies DIR and --tokens FILE to serve your own")
	} else {
		fmt.Fprintf(w, "pigeon: serving %d subjects from %s (%s), %d tokens\n", len(names), cfg.policies, strings.Join(names, ", "), len(tokens))
	}
	fmt.Fprintf(w, "pigeon: store: %s\n", printable(storeBanner)) // a Store's text: a cluster's URL, a node's name
	scheme, wsScheme := "http", "ws"
	if cfg.tlsCert != "" {
		scheme, wsScheme = "https", "wss"
	}
	base := scheme + "://" + addr
	fmt.Fprintf(w, "pigeon: health     %s/health\n", base)
	fmt.Fprintf(w, "pigeon: HTTP API   %s/v1/subjects\n", base)
	fmt.Fprintf(w, "pigeon: WebSocket  %s://%s/v1/ws\n", wsScheme, addr)
	fmt.Fprintf(w, "pigeon: console    %s/ (API reference at %s/docs)\n", base, base)
	if metricsURL == "" {
		metricsURL = base + "/metrics"
	}
	fmt.Fprintf(w, "pigeon: metrics    %s\n", metricsURL)
	fmt.Fprintln(w, "pigeon: Ctrl-C stops it")
}

// edgeBanner says how callers authenticate.
func edgeBanner(w io.Writer, e *edge) {
	fmt.Fprintf(w, "pigeon: authentication: %s\n", strings.Join(e.order, ", "))
	if e.cert != nil {
		fmt.Fprintf(w, "pigeon: TLS certificate valid until %s (reloaded when its file changes, or on SIGHUP)\n",
			e.cert.Certificate().Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// mibBytes is n MiB in bytes: 0 stays 0 (the default), a negative n is -1
// (no cap), and one too large for an int64 is the largest.
func mibBytes(n int64) int64 {
	switch {
	case n < 0:
		return -1
	case n > math.MaxInt64>>20:
		return math.MaxInt64
	}
	return n << 20
}

// metricsHandlerFor is h behind the bearer token of --metrics-token-file,
// or h when none is set. The file must not be world-writable, and holds
// the token alone (white space around it is cut).
func metricsHandlerFor(cfg serveConfig, h http.Handler) (http.Handler, error) {
	if cfg.metricsTokenFile == "" {
		return h, nil
	}
	if err := checkNotWorldWritable(cfg.metricsTokenFile); err != nil {
		return nil, fmt.Errorf("--metrics-token-file: %w", err)
	}
	b, err := readRegularFile(cfg.metricsTokenFile, maxConfigFile)
	if err != nil {
		return nil, fmt.Errorf("--metrics-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if err := server.CheckBearerToken(token); err != nil {
		return nil, fmt.Errorf("--metrics-token-file %s: %w", cfg.metricsTokenFile, err)
	}
	return server.RequireBearer(token, h), nil
}

// programOptions are the options of the server's programs.Manager.
func (cfg *serveConfig) programOptions(kv store.KV, logger *slog.Logger) *programs.Options {
	return &programs.Options{KV: kv, Logger: logger, KeepVersions: cfg.programVersions,
		MaxProgramsPerAccount: cfg.maxPrograms, MaxMemoryPerAccount: mibBytes(cfg.maxProgramMemMB),
		MaxHops: cfg.programMaxHops, MaxDescendants: cfg.programMaxDescendants, LineageSize: cfg.programLineage}
}
