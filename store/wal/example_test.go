package wal_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"pigeon/store"
	"pigeon/store/wal"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "pigeon-wal")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s, err := wal.Open(dir, &wal.Options{Sync: wal.SyncBatch})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	m, _, err := s.Append(ctx, store.Message{Subject: "orders.created", ID: "m1", Time: now, Body: []byte(`{"id":1}`)})
	if err != nil { // durable once it returns
		fmt.Println(err)
		return
	}
	fmt.Println("stored seq", m.Seq)
	_ = s.Close(ctx)

	// A new process finds it again.
	s, _ = wal.Open(dir, nil)
	defer s.Close(ctx)
	got, _ := s.Lookup(ctx, "m1")
	fmt.Println(got.Subject, got.Seq, string(got.Body))
	// Output:
	// stored seq 1
	// orders.created 1 {"id":1}
}

func ExampleVerifyAudit() {
	dir, _ := os.MkdirTemp("", "pigeon-wal")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, _ := wal.Open(dir, nil)
	r := store.AuditRecord{Seq: 1, ID: "a1", Type: "publish.accepted", Time: time.Unix(0, 0), PrevHash: store.Genesis}
	r.Hash = r.ComputeHash()
	_ = s.AppendAudit(ctx, r)
	_ = s.Close(ctx)

	n, err := wal.VerifyAudit(dir) // offline: no lock, read only
	fmt.Println(n, err)
	// Output: 1 <nil>
}
