package memory_test

import (
	"context"
	"fmt"
	"time"

	"pigeon/store"
	"pigeon/store/memory"
)

func ExampleNew() {
	ctx := context.Background()
	s := memory.New(nil)
	defer s.Close(ctx)

	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	m := store.Message{
		Subject: "payments.authorize", ID: "msg-1", Time: now,
		IdemKey: "checkout:order-42", IdemExpires: now.Add(time.Hour),
		Body: []byte(`{"amount":42}`),
	}
	first, dup, _ := s.Append(ctx, m)
	fmt.Println(first.Seq, dup)

	// The same key within the hour returns the original and stores nothing.
	m.ID, m.Time = "msg-2", now.Add(time.Minute)
	again, dup, _ := s.Append(ctx, m)
	fmt.Println(again.ID, again.Seq, dup)

	msgs, _ := s.Read(ctx, "payments.authorize", 0, 0)
	fmt.Println(len(msgs), string(msgs[0].Body))
	// Output:
	// 1 false
	// msg-1 1 true
	// 1 {"amount":42}
}
