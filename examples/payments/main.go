// Command payments walks the adoption path of a governed broker, in
// process and narrated (package walkthrough): negotiate a contract, send
// one valid payment, retry it, watch an unauthorized service be refused,
// trigger the sensitive-data gates, receive only what was accepted, try a
// replay, and verify the audit chain. `pigeon demo` tells the same story.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"pigeon"
	"pigeon/demo"
	"pigeon/examples/payments/walkthrough"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	broker, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       demo.Catalog(),
		Region:        "uk",
	})
	if err != nil {
		return err
	}
	defer broker.Shutdown(ctx)
	return walkthrough.Run(ctx, broker, out)
}
