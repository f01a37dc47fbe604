package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// TestExhaustionTheStoreFailsToRecordIsWrittenOnce: a message whose
// attempts ran out is quarantined (or dropped) and audited
// delivery.exhausted, then recorded done for its group; when that done
// write fails (a full disk), the next try only records it done: one
// quarantine copy, one quarantine.created and one delivery.exhausted
// record for the message, on the node that wrote them and, for a
// quarantined message, on a node that starts after it (a restart, or
// another node of a cluster: the copy's id is the message's in its
// group, and is looked up first). Before, every try quarantined and
// audited the message again.
func TestExhaustionTheStoreFailsToRecordIsWrittenOnce(t *testing.T) {
	tests := []struct {
		name       string
		quarantine bool // the subject quarantines exhausted messages
		restart    bool // the try after the failure is a new engine's
	}{
		{name: "quarantined", quarantine: true},
		{name: "dropped"},
		{name: "quarantined, retried after a restart", quarantine: true, restart: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newProgressFailingStore(t, 1, store.ErrFull)
			opts := func(o *pigeon.Options) {
				o.Store = st
				for i := range o.Catalog.Subjects {
					if s := &o.Catalog.Subjects[i]; s.Name == "tasks.run" {
						s.Delivery.Retry.MaxAttempts = 1
						s.Quarantine.OnHandlerFailure = tt.quarantine
					}
				}
			}
			f := evictFixture(t, opts)
			boss := f.connect("boss-token", "tasks.run")
			alice := f.connect("alice-token", "tasks.run")
			id := publishTasks(t, boss, 1, 1)[0]
			got, err := alice.Receive(ctx, "tasks.run", 1)
			require.NoError(t, err)
			require.Len(t, got, 1)
			f.clock.Advance(2 * time.Second) // its one attempt runs out

			_, err = alice.Receive(ctx, "tasks.run", 1)
			requireCode(t, err, pigeon.CodeStoreFull)
			require.True(t, st.failed(), "the done write of the exhausted message failed")
			if tt.restart {
				require.NoError(t, f.e.Shutdown(context.Background()))
				f = evictFixture(t, opts)
				alice = f.connect("alice-token", "tasks.run")
			}
			got, err = alice.Receive(ctx, "tasks.run", 1)
			require.NoError(t, err)
			require.Empty(t, got)
			require.Equal(t, uint64(0), groupLag(t, f.e, "tasks.run")[pigeon.DefaultGroup], "the exhausted message is done for the group")

			count := func(ev pigeon.Event) int {
				n := 0
				for _, r := range auditOf(t, f.e, ev) {
					if r.MessageID == id {
						n++
					}
				}
				return n
			}
			require.Equal(t, 1, count(pigeon.EventDeliveryExhausted), "one delivery.exhausted record of the message")
			recs, err := f.e.Quarantine(ctx, time.Time{}, 100)
			require.NoError(t, err)
			copies := 0
			for _, r := range recs {
				if r.MessageID == id {
					copies++
				}
			}
			want := 0
			if tt.quarantine {
				want = 1
			}
			require.Equal(t, want, copies, "quarantine copies of the message")
			require.Equal(t, want, count(pigeon.EventQuarantineCreated), "quarantine.created records of the message")
		})
	}
}
