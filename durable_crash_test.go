package pigeon_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/wal"
	"pigeon/store/wal/crashtest"
)

// TestBrokerCrashAcceptedAudited kills a child in which 64 publishers
// publish concurrently through the broker on a WAL store (16 of them in
// batches, Engine.PublishBatch): every publish
// the child saw answered "accepted" must be stored exactly once and have
// exactly one publish.accepted audit record naming it and its publisher,
// in a chain that verifies, although the child was killed with batches
// written and not yet answered, and acceptance records not yet in the
// audit log.
func TestBrokerCrashAcceptedAudited(t *testing.T) {
	if testing.Short() {
		t.Skip("crash rounds take seconds")
	}
	crashtest.Run(t, crashtest.Config{
		Child:  "TestBrokerCrashAcceptedAuditedChild",
		Rounds: 6,
		Check: func(t *testing.T, dir string, acks []string) {
			e, st := openDurable(t, dir, nil)
			defer closeDurable(t, e, st)
			_, err := e.VerifyAudit(ctx)
			require.NoError(t, err)
			_, err = store.VerifyAudit(ctx, st)
			require.NoError(t, err)
			recs, err := e.Audit(ctx, 0, 0)
			require.NoError(t, err)
			audited := map[string]int{}
			for _, r := range recs {
				if r.Type == string(pigeon.EventPublishAccepted) {
					audited[r.MessageID]++
					require.Equal(t, "notifications.send", r.Subject)
					require.Equal(t, demo.Orders, r.Principal, "record of %s", r.MessageID)
				}
			}
			for _, a := range acks {
				f := strings.Fields(a)
				require.Len(t, f, 3)
				require.Equal(t, pigeon.StatusAccepted, f[0])
				m, err := st.Lookup(ctx, f[1])
				require.NoError(t, err, "accepted message %s is stored", f[1])
				require.Equal(t, f[2], strconv.FormatUint(m.Seq, 10))
				require.Equal(t, 1, audited[f[1]], "accepted message %s has one acceptance record", f[1])
			}
			for id, n := range audited {
				require.Equal(t, 1, n, "acceptance records of %s", id)
			}
		},
	})
}

func TestBrokerCrashAcceptedAuditedChild(t *testing.T) {
	dir, ok := crashtest.ChildDir()
	if !ok {
		t.Skip("runs as the child of TestBrokerCrashAcceptedAudited")
	}
	st, err := wal.Open(dir, nil)
	require.NoError(t, err)
	e, err := pigeon.New(context.Background(), &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for c := range 4 {
		s, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
		require.NoError(t, err)
		for p := range 16 {
			if c == 3 {
				// A quarter of the publishers publish batches of 8: one
				// write for each batch.
				who, err := e.Authenticate(ctx, "orders-token")
				require.NoError(t, err)
				caller := pigeon.Caller{Principal: who, Region: "uk", ContractID: s.Contract().ID()}
				wg.Go(func() {
					for i := 0; ; i++ {
						msgs := make([]*pigeon.Message, 8)
						for j := range msgs {
							msgs[j] = demo.Notification(fmt.Sprintf("%d-%d-%d-%d-%d", time.Now().UnixNano(), c, p, i, j))
						}
						for _, r := range e.PublishBatch(ctx, caller, msgs) {
							if r.Err != nil {
								panic(r.Err)
							}
							crashtest.Ack(r.Result.Status, r.Result.Message.ID, strconv.FormatUint(r.Result.Message.Sequence, 10))
						}
					}
				})
				continue
			}
			wg.Go(func() {
				for i := 0; ; i++ {
					key := fmt.Sprintf("%d-%d-%d-%d", time.Now().UnixNano(), c, p, i)
					res, err := s.Publish(ctx, demo.Notification(key))
					if err != nil {
						panic(err)
					}
					crashtest.Ack(res.Status, res.Message.ID, strconv.FormatUint(res.Message.Sequence, 10))
				}
			})
		}
	}
	wg.Wait()
}
