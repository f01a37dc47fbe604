package pigeon_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
)

// withMaxBytes sets retention.maxBytes of subject.
func withMaxBytes(subject string, n int64) func(*pigeon.Options) {
	return func(o *pigeon.Options) {
		for i, s := range o.Catalog.Subjects {
			if s.Name == subject {
				o.Catalog.Subjects[i].Retention.MaxBytes = n
			}
		}
	}
}

// taskEnvelope is the stored size of a task (1 to 9) published by the
// boss on tasks.run: every such task's envelope has the same length.
func taskEnvelope(t *testing.T) int64 {
	f, st := retentionFixture(t, 0)
	publishTasks(t, f.connect("boss-token", "tasks.run"), 1, 1)
	msgs, err := st.Read(ctx, "tasks.run", 0, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	return int64(len(msgs[0].Body))
}

// TestRetentionMaxBytes: a retention pass keeps the newest messages of a
// subject whose stored envelopes add up to at most retention.maxBytes and
// trims the older ones, after those its messagesMs and maxMessages trim,
// audited by one retention.messages record per pass that trimmed, with
// how many went by age, count and size together; the floor of a group
// behind the cut is raised to it, and the group goes on at the first
// kept message. A bound not reached, or 0, trims nothing.
func TestRetentionMaxBytes(t *testing.T) {
	size := taskEnvelope(t)
	cases := []struct {
		name     string
		keep     time.Duration // retention.messagesMs
		maxCount int64         // retention.maxMessages
		maxBytes int64         // in bytes
		rounds   []retentionRound
	}{
		{"BoundReached", 0, 0, 3*size + size/2, []retentionRound{{0, 8, 6, "5"}}},
		{"ExactlyTheBound", 0, 0, 3 * size, []retentionRound{{0, 8, 6, "5"}}},
		{"BoundNotReachedThenReached", 0, 0, 5 * size, []retentionRound{{0, 4, 1, ""}, {0, 1, 1, ""}, {0, 3, 4, "3"}, {0, 0, 4, ""}}},
		// 2 by age, 2 by count, 2 by size: one record of 6.
		{"AfterTheAgeAndCountTrims", time.Hour, 4, 2 * size, []retentionRound{{0, 2, 1, ""}, {time.Hour + time.Minute, 6, 7, "6"}}},
		{"CountAloneWithinTheBound", 0, 3, 10 * size, []retentionRound{{0, 8, 6, "5"}}},
		{"ZeroIsNoBound", 0, 0, 0, []retentionRound{{0, 8, 1, ""}, {0, 1, 1, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, st := retentionFixture(t, c.keep, withMaxBytes("tasks.run", c.maxBytes), func(o *pigeon.Options) {
				for i, s := range o.Catalog.Subjects {
					if s.Name == "tasks.run" {
						o.Catalog.Subjects[i].Retention.MaxMessages = c.maxCount
					}
				}
			})
			runRetentionRounds(t, f, st, c.rounds, func(i int, kept []store.Message) {
				var held uint64
				for _, m := range kept {
					require.Len(t, m.Body, int(size), "every task's envelope is as long")
					held += uint64(len(m.Body))
				}
				got, err := st.Bytes(ctx, "tasks.run")
				require.NoError(t, err)
				require.Equal(t, held, got, "round %d: the store's count of bytes", i)
				if c.maxBytes > 0 {
					require.LessOrEqual(t, held, uint64(c.maxBytes), "round %d: within the bound", i)
				}
			})
		})
	}
}

// paddedTask is task n with data padded to about pad bytes.
func paddedTask(n, pad int) *pigeon.Message {
	m := task(n)
	m.Data = json.RawMessage(`{"n":` + strconv.Itoa(n) + `,"pad":"` + strings.Repeat("x", pad) + `"}`)
	return m
}

// TestMaxBytesHoldsBetweenPasses: retention.maxBytes holds as messages
// arrive, not only at each retention pass: with no pass run, a subject
// keeping 64 KiB that is sent about 1 MiB holds at most 64 KiB plus its
// slack (maxBytes/8, at least 64 KiB), the newest messages, and the trims
// that cut the rest are audited with how many went.
func TestMaxBytesHoldsBetweenPasses(t *testing.T) {
	const keep, slack, sent = 64 << 10, 64 << 10, 1000
	f, st := retentionFixture(t, 0, withMaxBytes("tasks.run", keep), func(o *pigeon.Options) {
		o.SweepInterval = time.Hour // no pass within the test
	})
	boss := f.connect("boss-token", "tasks.run")
	var ids []string
	for n := 1; n <= sent; n++ {
		r, err := boss.Publish(ctx, paddedTask(n, 1000))
		require.NoError(t, err)
		ids = append(ids, r.Message.ID)
	}

	var held uint64
	require.Eventually(t, func() bool {
		var err error
		held, err = st.Bytes(ctx, "tasks.run")
		require.NoError(t, err)
		return held <= keep+slack
	}, 30*time.Second, 5*time.Millisecond, "held %d bytes", held)
	first, last, err := st.Bounds(ctx, "tasks.run")
	require.NoError(t, err)
	require.Equal(t, uint64(sent), last)
	require.Greater(t, first, uint64(1), "trimmed")
	requireNewestKeptAndAudited(t, f, st, ids, first)
}

// TestMaxBytesRefusesAMessageLargerThanTheBound: a message whose stored
// envelope alone is larger than its subject's retention.maxBytes is
// refused with PAYLOAD_TOO_LARGE at the retention gate, audited as a
// refusal, and not stored, so that the trim never removes the message it
// just accepted; messages that fit are accepted around it, by Publish and
// by PublishBatch (whose store appends in batches).
func TestMaxBytesRefusesAMessageLargerThanTheBound(t *testing.T) {
	const bound = 4 << 10
	big := demo.Payment("o-big")
	big.Data = json.RawMessage(`{"merchantId":"m-100","orderId":"` + strings.Repeat("o", bound) +
		`","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c"}`)
	cases := []struct {
		name    string
		publish func(t *testing.T) (*pigeon.Engine, store.MessageLog, []pigeon.Published)
	}{
		{"Publish", func(t *testing.T) (*pigeon.Engine, store.MessageLog, []pigeon.Published) {
			e, st := openDurable(t, t.TempDir(), nil, withMaxBytes("payments.authorize", bound))
			t.Cleanup(func() { closeDurable(t, e, st) })
			s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
			require.NoError(t, err)
			var out []pigeon.Published
			for _, m := range []*pigeon.Message{demo.Payment("o-1"), big, demo.Payment("o-2")} {
				res, err := s.Publish(ctx, m)
				out = append(out, pigeon.Published{Result: res, Err: err})
			}
			return e, st, out
		}},
		{"PublishBatch", func(t *testing.T) (*pigeon.Engine, store.MessageLog, []pigeon.Published) {
			e, st := openDurable(t, t.TempDir(), nil, withMaxBytes("payments.authorize", bound))
			t.Cleanup(func() { closeDurable(t, e, st) })
			s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
			require.NoError(t, err)
			who, err := e.Authenticate(ctx, "checkout-token")
			require.NoError(t, err)
			caller := pigeon.Caller{Principal: who, Region: "uk", ContractID: s.Contract().ID()}
			return e, st, e.PublishBatch(ctx, caller, []*pigeon.Message{demo.Payment("o-1"), big, demo.Payment("o-2")})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, st, got := c.publish(t)
			require.Len(t, got, 3)
			require.NoError(t, got[0].Err)
			require.NoError(t, got[2].Err)
			pe := requireCode(t, got[1].Err, pigeon.CodePayloadTooLarge)
			require.True(t, errors.Is(pe, pigeon.ErrInvalid))
			require.Contains(t, pe.Error(), "retention.maxBytes")

			first, last, err := st.Bounds(ctx, "payments.authorize")
			require.NoError(t, err)
			require.Equal(t, [2]uint64{1, 2}, [2]uint64{first, last}, "the two that fit are stored, the large one is not")
			msgs, err := st.Read(ctx, "payments.authorize", 0, 0)
			require.NoError(t, err)
			require.Equal(t, []string{got[0].Result.Message.ID, got[2].Result.Message.ID}, []string{msgs[0].ID, msgs[1].ID})

			denied := auditOf(t, e, pigeon.EventPublishDenied)
			require.Len(t, denied, 1)
			require.Equal(t, pigeon.GateRetention, denied[0].Gate)
			require.Equal(t, string(pigeon.CodePayloadTooLarge), denied[0].Code)
			require.Equal(t, "payments.authorize", denied[0].Subject)
			require.Equal(t, "payments.authorize@"+denied[0].PolicyID[len("payments.authorize@"):], denied[0].PolicyID)
			require.Len(t, auditOf(t, e, pigeon.EventRetentionMessages), 0, "nothing was trimmed")
		})
	}
}
