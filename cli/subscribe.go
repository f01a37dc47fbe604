package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"

	"pigeon"
	"pigeon/transport/ws"
)

// delivery is one line of `pigeon subscribe`.
type delivery struct {
	Subject string          `json:"subject"`
	Attempt int             `json:"attempt"`
	Message *pigeon.Message `json:"message"`
}

func subscribeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("subscribe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := clientFlags(fs)
	subject := fs.String("subject", "", "subject to subscribe to (required)")
	group := fs.String("group", "", "consumer group (work-queue subjects)")
	selector := fs.String("selector", "", `content selector, e.g. "/kind=chat/room=lobby"`)
	filter := fs.String("filter", "", "CEL filter over principal and message")
	start := fs.String("start", "new", `where a pubsub subscription starts: "new", "first" or a sequence`)
	inFlight := fs.Int("max-in-flight", 1, "deliveries handled at once")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *subject == "" {
		fmt.Fprintln(stderr, "pigeon subscribe: --subject is required")
		return 2
	}
	opts := []pigeon.SubscribeOption{pigeon.WithMaxInFlight(*inFlight)}
	switch *start {
	case "new":
	case "first":
		opts = append(opts, pigeon.WithStart(pigeon.StartFirst))
	default:
		n, err := strconv.ParseUint(*start, 10, 64)
		if err != nil || n == 0 {
			fmt.Fprintln(stderr, `pigeon subscribe: --start must be "new", "first" or a sequence >= 1`)
			return 2
		}
		opts = append(opts, pigeon.WithStart(pigeon.StartAt(n)))
	}
	for _, o := range []struct {
		v  string
		fn func(string) pigeon.SubscribeOption
	}{{*group, pigeon.WithGroup}, {*selector, pigeon.WithSelector}, {*filter, pigeon.WithFilter}} {
		if o.v != "" {
			opts = append(opts, o.fn(o.v))
		}
	}
	dialOpts, err := a.dialOptions()
	if err != nil {
		return fail(stderr, "subscribe", err)
	}
	s, err := ws.Dial(ctx, a.wsURL(), a.token, []string{*subject}, dialOpts...)
	if err != nil {
		return fail(stderr, "subscribe", err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	var mu sync.Mutex
	sub, err := s.Subscribe(ctx, *subject, func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		// A line of JSON, terminal-safe: the message is a publisher's text.
		return writeJSONLine(stdout, delivery{Subject: d.Subject, Attempt: d.Attempt, Message: d.Message})
	}, opts...)
	if err != nil {
		return fail(stderr, "subscribe", err)
	}
	select {
	case <-ctx.Done():
		return 0
	case <-sub.Done():
		if err := sub.Err(); err != nil {
			return fail(stderr, "subscribe", err)
		}
		return 0
	case <-s.Done():
		return fail(stderr, "subscribe", s.Err())
	}
}
