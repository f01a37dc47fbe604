package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"pigeon"
	"pigeon/demo"
	"pigeon/examples/payments/walkthrough"
)

// demoCmd tells the adoption path (package walkthrough, as
// examples/payments does) on an embedded broker: the demo catalog, in
// memory, no network.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pigeon demo\n\nNarrates the adoption path on an embedded broker (the demo catalog, in memory, no network).")
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pigeon demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	broker, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       demo.Catalog(),
		Region:        "uk",
	})
	if err != nil {
		return fail(stderr, "demo", err)
	}
	fmt.Fprintln(stdout, "pigeon demo: the adoption path on an embedded broker (demo catalog, in memory, no network)")
	err = walkthrough.Run(ctx, broker, stdout)
	if serr := broker.Shutdown(context.WithoutCancel(ctx)); err == nil {
		err = serr
	}
	if err != nil {
		return fail(stderr, "demo", err)
	}
	fmt.Fprintln(stdout, "next: `pigeon serve` and the README quickstart over HTTP, or `go run ./examples/server` over WebSocket")
	return 0
}
