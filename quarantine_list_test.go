package pigeon_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestQuarantineListStopsAtTheByteBudget: a quarantine page holds at most
// Options.MaxReadBytes of copies (always one record when there is one);
// paging on from the last record (its Time and ID) gives every record
// once, in order, on the memory and the WAL store, whether the records
// share one instant or not, more of them than the engine asks the store
// for at once. With the default budget one list holds them
// all, and max still bounds the count.
func TestQuarantineListStopsAtTheByteBudget(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T, clk func() time.Time, budget int) *pigeon.Engine
	}{
		{"memory", func(t *testing.T, clk func() time.Time, budget int) *pigeon.Engine {
			return newFixture(t, func(o *pigeon.Options) {
				o.Now, o.MaxReadBytes, o.QuarantineRate = clk, budget, pigeon.RateLimitPolicy{PerSecond: -1}
			}).e
		}},
		{"wal", func(t *testing.T, clk func() time.Time, budget int) *pigeon.Engine {
			e, st := openDurable(t, t.TempDir(), clk, func(o *pigeon.Options) {
				o.MaxReadBytes, o.QuarantineRate = budget, pigeon.RateLimitPolicy{PerSecond: -1}
			})
			t.Cleanup(func() {
				require.NoError(t, e.Shutdown(context.Background()))
				require.NoError(t, st.Close(context.Background()))
			})
			return e
		}},
	}
	// The size of one copy: all are of one size.
	f := newFixture(t)
	ids := quarantineSome(t, f.e, 5, f.clock.Now, func() {})
	all, err := f.e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, all, 5, "the default budget holds them all")
	require.Equal(t, ids[0], all[0].ID)
	three, err := f.e.Quarantine(ctx, time.Time{}, 3)
	require.NoError(t, err)
	require.Len(t, three, 3)
	copySize := len(all[0].Body)
	for _, r := range all {
		require.Equal(t, copySize, len(r.Body))
	}

	for _, st := range stores {
		for _, apart := range []bool{false, true} {
			name := st.name + "/one instant"
			if apart {
				name = st.name + "/apart"
			}
			t.Run(name, func(t *testing.T) {
				clk := newClock()
				n := 9
				if !apart {
					n = 300 // more than a chunk of the store shares the instant
				}
				// A budget of about two copies.
				e := st.open(t, clk.Now, 2*copySize+10)
				ids := quarantineSome(t, e, n, clk.Now, func() {
					if apart {
						clk.Advance(time.Millisecond)
					}
				})

				var got []string
				var q pigeon.QuarantineQuery
				for {
					page, err := e.QuarantinePage(ctx, q)
					require.NoError(t, err)
					if len(page) == 0 {
						break
					}
					require.LessOrEqual(t, len(page), 2, "the budget bounds a page")
					for _, r := range page {
						got = append(got, r.ID)
					}
					require.Less(t, len(got), 2*n, "paging on makes progress")
					q.Since, q.After = page[len(page)-1].Time, page[len(page)-1].ID
				}
				require.Equal(t, ids, got, "every record once, oldest first")
				q = pigeon.QuarantineQuery{Since: time.Time{}, After: ids[3], Max: 1}
				if !apart {
					q.Since = clk.Now()
				}
				page, err := e.QuarantinePage(ctx, q)
				require.NoError(t, err)
				if apart {
					require.Equal(t, ids[:1], quarantineIDs(page), "After passes over the records of Since's instant only")
				} else {
					require.Equal(t, ids[4:5], quarantineIDs(page))
				}

				all, err := e.Quarantine(ctx, time.Time{}, 0)
				require.NoError(t, err)
				require.Len(t, all, 2, "the budget stops the first list")
				few, err := e.Quarantine(ctx, time.Time{}, 1)
				require.NoError(t, err)
				require.Len(t, few, 1)
			})
		}
	}
}

func quarantineIDs(recs []pigeon.QuarantineRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// quarantineSome has checkout's n payments with a card number refused and
// quarantined, calling between before each, and returns the records' ids in
// the order a list gives them: by time (now's when each is refused), then
// id.
func quarantineSome(t *testing.T, e *pigeon.Engine, n int, now func() time.Time, between func()) []string {
	t.Helper()
	p, err := e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	k, err := e.Negotiate(ctx, p, "uk", []string{"payments.authorize"}, 0)
	require.NoError(t, err)
	c := pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}
	type kept struct {
		at time.Time
		id string
	}
	var recs []kept
	for i := range n {
		between()
		m := demo.Payment(fmt.Sprintf("o-%03d", i))
		m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`)
		_, err := e.Publish(ctx, c, m)
		require.ErrorIs(t, err, pigeon.ErrQuarantined)
		var pe *pigeon.Error
		require.ErrorAs(t, err, &pe)
		recs = append(recs, kept{now(), pe.Details["quarantineId"].(string)})
	}
	slices.SortFunc(recs, func(a, b kept) int { return cmp.Or(a.at.Compare(b.at), strings.Compare(a.id, b.id)) })
	ids := make([]string, n)
	for i, r := range recs {
		ids[i] = r.id
	}
	return ids
}
