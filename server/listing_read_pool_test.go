package server_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/audittest"
	"pigeon/internal/testclock"
	"pigeon/programs"
	"pigeon/server"
)

// listingFixture is boundFixture's server with opts and a programs
// Manager (GET /v1/programs).
func listingFixture(t *testing.T, opts *server.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	clk := testclock.New(time.Now())
	feed := server.NewFeed(0)
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Now:           clk.Now,
		Observer:      feed,
	})
	require.NoError(t, err)
	mg, err := programs.New(ctx, e, nil)
	require.NoError(t, err)
	opts.Feed, opts.Programs = feed, mg
	s, hs := serve(t, e, opts)
	t.Cleanup(func() { require.NoError(t, mg.Close(ctx)) }) // before the server and the engine
	return &fixture{e: e, s: s, hs: hs, clock: clk, feed: feed}
}

// TestNameListingsReserveReads: a page of GET /v1/accounts, /v1/roles or
// /v1/programs is a read of the server's read pool, as a page of the audit
// log or of the quarantine is: while reads in flight hold the pool
// (Options.MaxReadBytesInFlight), a listing waits for room and is then
// refused 429 RATE_LIMITED with Retry-After, before the directory or the
// programs are read, and audited access.denied with the route and the
// bound as Ref ("GET /v1/accounts read budget"), a flood coalesced into
// one record and one count. Once room is given back the listing is
// answered, and what it held is given back once its answer is written.
// Before, the listings took no room: any number of them ran at once
// whatever the pool held.
func TestNameListingsReserveReads(t *testing.T) {
	for _, name := range []string{"accounts", "roles", "programs"} {
		t.Run(name, func(t *testing.T) {
			path := "/v1/" + name
			defer server.SetReadWait(time.Millisecond)()
			const pool = 64 << 20
			f := listingFixture(t, &server.Options{MaxReadBytesInFlight: pool})
			release := server.HoldReadBytes(f.s, "another reader", pool) // answers written slowly hold the whole pool

			const flood = 10
			for range flood {
				r := f.do(t, http.MethodGet, path+"?max=5", "admin-token", "")
				require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
				require.Equal(t, pigeon.CodeRateLimited, r.code(t))
				require.Contains(t, string(r.body), "MaxReadBytesInFlight")
				require.Equal(t, "1", r.header.Get("Retry-After"))
			}
			ref := "GET " + path + " read budget"
			recs := boundRecords(t, f, pigeon.EventAccessDenied)
			require.Equal(t, []string{ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + ref}, audittest.Refs(recs))
			for _, r := range recs {
				require.Equal(t, demo.Administrator, r.Principal)
			}

			release()
			r := f.do(t, http.MethodGet, path+"?max=5", "admin-token", "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.Eventually(t, func() bool { return f.s.ReadBytesInFlight() == 0 }, 5*time.Second, time.Millisecond,
				"the listing's room is given back once its answer is written")
			require.Len(t, boundRecords(t, f, pigeon.EventAccessDenied), len(recs), "a listing served writes no refusal")
		})
	}
}
