package pigeon_test

import (
	"context"
	"errors"
	"fmt"

	"pigeon"
	"pigeon/demo"
)

// ExampleEngine_Receipts answers "who was handed message X, and when"
// from the audit log, in pages: each page after the Cursor of the last
// receipt of the one before, until one is not cut.
func ExampleEngine_Receipts() {
	ctx := context.Background()
	broker, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       demo.Catalog(),
		Region:        "uk",
	})
	if err != nil {
		panic(err)
	}
	defer broker.Shutdown(ctx)

	orders, err := broker.Connect(ctx, "orders-token", []string{"notifications.send"})
	if err != nil {
		panic(err)
	}
	res, err := orders.Publish(ctx, demo.Notification("k-1"))
	if err != nil {
		panic(err)
	}
	replayer, err := broker.Connect(ctx, "notify-replay-token", []string{"notifications.send"})
	if err != nil {
		panic(err)
	}
	for _, reason := range []string{"incident 7", "incident 8", "audit"} {
		if _, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: reason}); err != nil {
			panic(err)
		}
	}

	var after pigeon.ReceiptCursor
	for page := 1; ; page++ {
		rs, err := broker.Receipts(ctx, res.Message.ID, pigeon.WithMaxReceipts(2), pigeon.WithReceiptsAfter(after))
		for _, r := range rs {
			fmt.Println(page, r.Event, r.Ref)
		}
		if !errors.Is(err, pigeon.ErrReceiptsTruncated) {
			break
		}
		after = rs[len(rs)-1].Cursor()
	}
	// Output:
	// 1 replay.executed incident 7
	// 1 replay.executed incident 8
	// 2 replay.executed audit
}
