package ws_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestPullNackDelayIsShortenedToTheMaximum: the Go session's pull Nack and
// NackSequence send a delay above pigeon.MaxRetryDelay as the maximum, as
// its push nacks (RetryAfter) and the other clients' pull nacks do, rather
// than a delayMs the broker refuses with INVALID_ARGUMENT (which left the
// message to come back after the ack wait instead of the delay asked).
func TestPullNackDelayIsShortenedToTheMaximum(t *testing.T) {
	maxMs := pigeon.MaxRetryDelay.Milliseconds()
	cases := []struct {
		name  string
		delay time.Duration
		want  int64 // delayMs sent; -1: none (the subject's backoff)
	}{
		{"Backoff", -1, -1},
		{"Zero", 0, 0},
		{"Minute", time.Minute, time.Minute.Milliseconds()},
		{"TheMaximum", pigeon.MaxRetryDelay, maxMs},
		{"JustAbove", pigeon.MaxRetryDelay + time.Millisecond, maxMs},
		{"AThousandHours", 1000 * time.Hour, maxMs},
		{"TheLongestDuration", math.MaxInt64, maxMs},
	}
	sent := make(chan int64, 1)
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		if !negotiated(ctx, c) {
			return
		}
		for f := readFrame(ctx, c); f != nil; f = readFrame(ctx, c) {
			if f.Op == "nack" {
				ms := int64(-1)
				if f.DelayMs != nil {
					ms = *f.DelayMs
				}
				sent <- ms
			}
			if c.Write(ctx, websocket.MessageText, []byte(`{"op":"ok","re":"`+f.ID+`"}`)) != nil {
				return
			}
		}
	})
	s := dialChat(t, url)
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, s.Nack(ctx, "jobs.run", "job-1", c.delay))
			require.Equal(t, c.want, <-sent, "Nack")
			require.NoError(t, s.NackSequence(ctx, "jobs.run", "job-1", 7, c.delay))
			require.Equal(t, c.want, <-sent, "NackSequence")
		})
	}
}

// TestPullNackBeyondTheMaximumHoldsTheMessage: end to end, a pull nack of
// a thousand hours is taken and holds the message back (for the longest
// delay), instead of being refused with the lease left to run out.
func TestPullNackBeyondTheMaximumHoldsTheMessage(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, longAckWait)
	boss := v.dial(t, "boss-token", []string{"jobs.run"})
	crew := v.dial(t, "crew-token", []string{"jobs.run"})
	for i, settle := range []func(id string, seq uint64) error{
		func(id string, _ uint64) error { return crew.Nack(ctx, "jobs.run", id, 1000*time.Hour) },
		func(id string, seq uint64) error { return crew.NackSequence(ctx, "jobs.run", id, seq, 1000*time.Hour) },
	} {
		id := "job-" + strconv.Itoa(i)
		_, err := boss.Publish(ctx, &pigeon.Message{ID: id, Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
		require.NoError(t, err)
		got, err := crew.Receive(ctx, "jobs.run", 5)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.NoError(t, settle(id, got[0].Sequence), "a delay beyond the maximum is shortened, not refused")
		got, err = crew.Receive(ctx, "jobs.run", 5)
		require.NoError(t, err)
		require.Empty(t, got, "the nack holds the message back for its delay")
	}
}
