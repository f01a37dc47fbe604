// Command pigeon-bridge runs a NATS bridge (package pigeon/bridge/nats)
// against a running `pigeon serve`, over WebSocket, from a YAML file:
//
//	pigeon-bridge --config bridge.yaml [--check]
//
// --check reads and checks the file and exits. The bridge stops on
// SIGINT or SIGTERM (exit 0), on a fatal error such as a revoked contract
// (exit 1), and refuses to start on a bad file (exit 2) or when NATS or the
// broker cannot be reached (exit 1). The credential's principal must hold
// the role bridge (pigeon.RoleBridge) for maxHops to bound a loop of
// bridges: the broker takes a message's depth only from such a principal,
// and without it the bridge publishes at 0 and logs so. docs/bridges.md
// is the reference.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"pigeon"
	natsbridge "pigeon/bridge/nats"
	"pigeon/transport/ws"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command: flags → config → Options → New → Run.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pigeon-bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the YAML configuration `file` (required)")
	check := fs.Bool("check", false, "check the configuration and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: pigeon-bridge --config FILE [--check]")
		return 2
	}
	data, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon-bridge: %v\n", err)
		return 2
	}
	cfg, err := parseConfig(data)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon-bridge: %s: %v\n", *path, err)
		return 2
	}
	cred, err := cfg.credential()
	if err != nil {
		fmt.Fprintf(stderr, "pigeon-bridge: %s: %v\n", *path, err)
		return 2
	}
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := natsbridge.Options{
		Dialer: ws.Dialer{URL: cfg.Pigeon.URL, Options: []ws.Option{ws.WithLogger(logger),
			ws.WithConnectOptions(pigeon.WithRegion(cfg.Pigeon.Region), pigeon.WithContractTTL(cfg.Pigeon.ContractTTL))}},
		Credential: cred, URL: cfg.NATS.URL, Routes: cfg.routes(),
		PublishTimeout: cfg.PublishTimeout, MaxReconnectDelay: cfg.MaxReconnectDelay, MaxMessageBytes: cfg.MaxMessageBytes, MaxHops: cfg.MaxHops, Logger: logger,
	}
	if _, err := natsbridge.New(opts); err != nil {
		fmt.Fprintf(stderr, "pigeon-bridge: %s: %v\n", *path, err)
		return 2
	}
	if *check {
		fmt.Fprintf(stdout, "pigeon-bridge: %s: %d routes, ok\n", *path, len(opts.Routes))
		return 0
	}

	natsOpts := natsbridge.ConnectOptions()
	if cfg.NATS.CredsFile != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(cfg.NATS.CredsFile))
	}
	nc, err := nats.Connect(cfg.NATS.URL, natsOpts...)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = errors.New("the URL does not parse") // its text quotes the URL, password and all
		}
		fmt.Fprintf(stderr, "pigeon-bridge: cannot reach NATS at %s: %v\n", natsbridge.RedactURL(cfg.NATS.URL), err)
		return 1
	}
	defer nc.Close()
	opts.URL, opts.NATS = "", nc
	b, err := natsbridge.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon-bridge: %v\n", err)
		return 2
	}
	logger.Info("pigeon-bridge: starting", "pigeon", natsbridge.RedactURL(cfg.Pigeon.URL), "nats", natsbridge.RedactURL(cfg.NATS.URL), "routes", len(opts.Routes))
	err = b.Run(ctx)
	switch {
	case err == nil:
		logger.Info("pigeon-bridge: stopped")
		return 0
	case b.Stats().Sessions == 0:
		fmt.Fprintf(stderr, "pigeon-bridge: cannot start against pigeon at %s: %v\n", natsbridge.RedactURL(cfg.Pigeon.URL), err)
	case errors.Is(err, pigeon.ErrContract):
		fmt.Fprintf(stderr, "pigeon-bridge: stopped: the bridge's contract no longer holds (%s): %v\n", pigeon.ErrorCode(err), err)
	default:
		fmt.Fprintf(stderr, "pigeon-bridge: stopped: %v\n", err)
	}
	return 1
}
