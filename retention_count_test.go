package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestRetentionMaxMessages: a retention pass keeps the newest
// retention.maxMessages messages of a subject and trims the older ones,
// after those its messagesMs trims, audited by one retention.messages
// record per pass that trimmed; the floor of a group behind the cut is
// raised to it, and the group goes on at the first kept message. A bound
// not reached, or 0, trims nothing.
func TestRetentionMaxMessages(t *testing.T) {
	cases := []struct {
		name   string
		keep   time.Duration // retention.messagesMs
		max    int64
		rounds []retentionRound
	}{
		{"BoundReached", 0, 3, []retentionRound{{0, 8, 6, "5"}}},
		{"BoundNotReachedThenReached", 0, 5, []retentionRound{{0, 4, 1, ""}, {0, 1, 1, ""}, {0, 3, 4, "3"}, {0, 0, 4, ""}}},
		{"AfterTheAgeTrim", time.Hour, 3, []retentionRound{{0, 3, 1, ""}, {time.Hour + time.Minute, 5, 6, "5"}}}, // 3 by age, 2 by count
		{"AgeAloneWithinTheBound", time.Hour, 10, []retentionRound{{0, 4, 1, ""}, {time.Hour + time.Minute, 4, 5, "4"}}},
		{"ZeroIsNoBound", 0, 0, []retentionRound{{0, 8, 1, ""}, {0, 8, 1, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, st := retentionFixture(t, c.keep, func(o *pigeon.Options) {
				for i, s := range o.Catalog.Subjects {
					if s.Name == "tasks.run" {
						o.Catalog.Subjects[i].Retention.MaxMessages = c.max
					}
				}
			})
			runRetentionRounds(t, f, st, c.rounds, nil)
		})
	}
}

// TestMaxMessagesHoldsBetweenPasses: retention.maxMessages holds as
// messages arrive, not only at each retention pass: with no pass run, a
// subject keeping 100 messages that is sent 1,000 holds at most 100 plus
// its slack (maxMessages/8, at least 32), the newest, and the trims that
// cut the rest are audited with how many went.
func TestMaxMessagesHoldsBetweenPasses(t *testing.T) {
	const keep, slack, sent = 100, 32, 1000
	f, st := retentionFixture(t, 0, func(o *pigeon.Options) {
		o.SweepInterval = time.Hour // no pass within the test
		for i, s := range o.Catalog.Subjects {
			if s.Name == "tasks.run" {
				o.Catalog.Subjects[i].Retention.MaxMessages = keep
			}
		}
	})
	boss := f.connect("boss-token", "tasks.run")
	ids := publishTasks(t, boss, 1, sent)

	var first, last uint64
	require.Eventually(t, func() bool {
		var err error
		first, last, err = st.Bounds(ctx, "tasks.run")
		require.NoError(t, err)
		return last-first+1 <= keep+slack
	}, 30*time.Second, 5*time.Millisecond, "held %d..%d", first, last)
	require.Equal(t, uint64(sent), last)
	requireNewestKeptAndAudited(t, f, st, ids, first)
}

// heldTrims is a memory store whose first TrimThrough waits for let.
type heldTrims struct {
	*memory.Store
	first     atomic.Bool
	held, let chan struct{}
}

func (h *heldTrims) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	if h.first.CompareAndSwap(false, true) {
		close(h.held)
		<-h.let
	}
	return h.Store.TrimThrough(ctx, subject, seq)
}

// TestMaxMessagesHoldsAfterASlowTrim: messages accepted while a count trim
// runs ask for no trim of their own (one is asked for at a time); when
// they pass the bound and no message follows them, the trim that ends
// asks again for them, and the subject comes back within its bound.
func TestMaxMessagesHoldsAfterASlowTrim(t *testing.T) {
	const keep, slack, sent = 100, 32, 1000
	st := &heldTrims{Store: memory.New(nil), held: make(chan struct{}), let: make(chan struct{})}
	t.Cleanup(func() { _ = st.Close(ctx) })
	f := evictFixture(t, func(o *pigeon.Options) {
		o.Store, o.SweepInterval = st, time.Hour
		for i, s := range o.Catalog.Subjects {
			if s.Name == "tasks.run" {
				o.Catalog.Subjects[i].Retention.MaxMessages = keep
			}
		}
	})
	boss := f.connect("boss-token", "tasks.run")
	publishTasks(t, boss, 1, keep+slack+1)
	<-st.held // the first trim runs, and waits
	publishTasks(t, boss, keep+slack+2, sent)
	close(st.let)
	require.Eventually(t, func() bool {
		first, last, err := st.Bounds(ctx, "tasks.run")
		require.NoError(t, err)
		return last == sent && last-first+1 <= keep+slack
	}, 30*time.Second, 5*time.Millisecond)
}

// retentionRound is one round of a retention table test: the clock moves
// on, the boss publishes tasks, a retention pass runs.
type retentionRound struct {
	advance time.Duration // on the clock before publishing
	publish int
	first   uint64 // the first retained sequence after the pass
	trimmed string // the Ref of the pass's audit record; "" none
}

// runRetentionRounds runs rounds on tasks.run of f, whose store is st,
// holding the default group. After the first round's publishes the group
// handles the first message. After each pass it requires the bounds, the
// newest messages kept, oldest first (check, when not nil, looks at them
// too), one retention.messages record per pass that trimmed, with how
// many went, and the group's floor raised to the cut. Then the group goes
// on at the first kept message (or the one after the message it
// handled), each once, in order, to the last.
func runRetentionRounds(t *testing.T, f *fixture, st *memory.Store, rounds []retentionRound, check func(round int, kept []store.Message)) {
	t.Helper()
	boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	release, err := f.e.HoldGroup(ctx, "tasks.run", pigeon.DefaultGroup)
	require.NoError(t, err)
	defer release()

	var ids, audits []string
	for i, r := range rounds {
		f.clock.Advance(r.advance)
		ids = append(ids, publishTasks(t, boss, len(ids)+1, len(ids)+r.publish)...)
		if i == 0 {
			require.Equal(t, ids[:1], receiveIDs(t, bob, "tasks.run", 1))
			require.NoError(t, bob.Ack(ctx, "tasks.run", ids[0]))
		}
		f.e.EnforceRetention(ctx)

		first, last, err := st.Bounds(ctx, "tasks.run")
		require.NoError(t, err)
		require.Equal(t, [2]uint64{r.first, uint64(len(ids))}, [2]uint64{first, last}, "round %d: bounds", i)
		msgs, err := st.Read(ctx, "tasks.run", 0, 0)
		require.NoError(t, err)
		var kept []string
		for _, m := range msgs {
			kept = append(kept, m.ID)
		}
		require.Equal(t, ids[r.first-1:], kept, "round %d: the newest messages, oldest first", i)
		if check != nil {
			check(i, msgs)
		}
		if r.trimmed != "" {
			audits = append(audits, r.trimmed)
		}
		var refs []string
		for _, rec := range auditOf(t, f.e, pigeon.EventRetentionMessages) {
			require.Equal(t, "tasks.run", rec.Subject)
			require.Equal(t, string(pigeon.CodeOK), rec.Code)
			require.Equal(t, "tasks.run@v1", rec.PolicyID)
			refs = append(refs, rec.Ref)
		}
		require.Equal(t, audits, refs, "round %d: one record per pass that trimmed, with how many went", i)
		requireProgress(t, st, "tasks.run", pigeon.DefaultGroup, store.GroupState{Floor: max(1, r.first-1)})
	}

	first := max(2, rounds[len(rounds)-1].first)
	var got []string
	for range len(ids) {
		next := receiveIDs(t, bob, "tasks.run", 1)
		if len(next) == 0 {
			break
		}
		require.NoError(t, bob.Ack(ctx, "tasks.run", next[0]))
		got = append(got, next...)
	}
	require.Equal(t, ids[first-1:], got)
	requireProgress(t, st, "tasks.run", pigeon.DefaultGroup, store.GroupState{Floor: uint64(len(ids))})
}

// requireNewestKeptAndAudited requires tasks.run in st to hold the
// newest of ids, from first or later (a trim running when the caller read
// first may end before this read), and waits until retention.messages
// records account for every message before the first held: a trim audits
// what went once the store has cut it.
func requireNewestKeptAndAudited(t *testing.T, f *fixture, st *memory.Store, ids []string, first uint64) {
	t.Helper()
	msgs, err := st.Read(ctx, "tasks.run", 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, msgs)
	held := msgs[0].Seq
	require.GreaterOrEqual(t, held, first, "trims only move the first message forward")
	var kept []string
	for _, m := range msgs {
		kept = append(kept, m.ID)
	}
	require.Equal(t, ids[held-1:], kept, "the newest are kept")
	audited := func() int { return auditedCount(t, f.e, pigeon.EventRetentionMessages) }
	require.Eventually(t, func() bool {
		first, _, err = st.Bounds(ctx, "tasks.run")
		require.NoError(t, err)
		return audited() == int(first-1)
	}, 30*time.Second, 5*time.Millisecond, "every trimmed message is audited: %d of %d", audited(), first-1)
}
