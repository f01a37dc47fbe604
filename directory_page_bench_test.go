package pigeon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pigeon/store/memory"
)

// BenchmarkListAccountsPage: one page of 100 of a directory of 100,000
// accounts (accountPage, as ListAccountsPage and GET /v1/accounts read
// it), the pages taken in turn from the first to the last and over again.
// "beside writes" creates or deletes an account between two pages, as a
// directory in use is changed while an admin pages through it.
func BenchmarkListAccountsPage(b *testing.B) {
	const accounts, max = 100_000, 100
	for _, writes := range []bool{false, true} {
		name := "read"
		if writes {
			name = "beside writes"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st := memory.New(nil)
			defer func() { _ = st.Close(ctx) }()
			var d directory
			if err := d.load(ctx, st, quiet); err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for i := range accounts {
				id := fmt.Sprintf("spiffe://bench/ns/a/sa/%06d", i)
				d.accounts[id] = &Account{ID: id, Roles: []string{"member"}, Attributes: map[string]string{"team": "a"}, CreatedAt: now}
			}
			noop := func() {}
			after := ""
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if writes {
					id := fmt.Sprintf("spiffe://bench/ns/b/sa/%06d", i/2)
					var err error
					if i%2 == 0 {
						err = d.createAccount(ctx, &Account{ID: id, CreatedAt: now}, noop)
					} else {
						err = d.deleteAccount(ctx, id, noop)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				page, more := d.accountPage(after, max)
				after = ""
				if more {
					after = page[len(page)-1].ID
				}
			}
		})
	}
}
