package wal

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/wal/crashtest"
)

var crashOpts = &Options{Sync: SyncBatch, SegmentSize: 32 << 10, CompactAfter: 100}

var crashGroup = store.GroupKey{Subject: "s0", Group: "g"}

// TestCrash SIGKILLs a child process that writes everything the store
// keeps, ten times, and checks after each kill that every acknowledged
// write is there exactly once, sequences have no gaps, retries are still
// duplicates and the audit chain verifies.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	crashtest.Run(t, crashtest.Config{Child: "TestCrashChild", Rounds: 10, Check: checkCrash})
}

// TestCrashChild is the child of TestCrash: it writes until it is killed.
func TestCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildDir()
	if !ok {
		t.Skip("runs as the child of TestCrash")
	}
	s, err := Open(dir, crashOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	pid := os.Getpid()
	stop := time.After(20 * time.Second) // killed long before
	var wg sync.WaitGroup
	run := func(f func(i int) error) {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := f(i); err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
					os.Exit(3)
				}
			}
		})
	}
	for g := range 4 {
		run(func(i int) error {
			subject := fmt.Sprint("s", (g+i)%3)
			id := fmt.Sprintf("%d-%d-%d", pid, g, i)
			m := store.Message{Subject: subject, ID: id, Time: time.Now(), Body: []byte(strings.Repeat(id, 10))}
			if i%2 == 0 {
				m.IdemKey, m.IdemExpires = "key-"+id, m.Time.Add(time.Hour)
			}
			got, _, err := s.Append(ctx, m)
			if err == nil {
				crashtest.Ack("msg", subject, got.Seq, id)
			}
			return err
		})
	}
	// Audit records are chained by the store (ChainAudit), as the broker
	// appends them now that the store chains acceptance records too.
	run(func(i int) error {
		r := []store.AuditRecord{{Type: "crash", Time: time.Now()}}
		if err := s.ChainAudit(ctx, r); err != nil {
			return err
		}
		crashtest.Ack("audit", r[0].Seq)
		return nil
	})
	// Accepted messages: many concurrent writers, each acknowledging
	// only after AppendAccepted returned.
	for g := range 8 {
		run(func(i int) error {
			id := fmt.Sprintf("a%d-%d-%d", pid, g, i)
			subject := fmt.Sprint("s", (g+i)%3)
			m := store.Message{Subject: subject, ID: id, Time: time.Now(), Body: []byte(id)}
			got, _, err := s.AppendAccepted(ctx, m, store.AuditRecord{Type: "accepted", Principal: "p-" + id, Time: m.Time})
			if err == nil {
				crashtest.Ack("accepted", subject, got.Seq, id)
			}
			return err
		})
	}
	g, err := s.LoadGroup(ctx, crashGroup)
	if err != nil {
		os.Exit(4)
	}
	next := g.Floor + 1
	run(func(i int) error {
		seq := next + uint64(i)
		if err := s.MarkAttempt(ctx, crashGroup, seq+1, 1); err != nil {
			return err
		}
		if err := s.MarkDone(ctx, crashGroup, seq); err != nil {
			return err
		}
		crashtest.Ack("done", seq)
		return nil
	})
	run(func(i int) error {
		key := fmt.Sprintf("%d-%d", pid, i)
		if err := s.Put(ctx, "crash", key, []byte(key)); err != nil {
			return err
		}
		crashtest.Ack("kv", key)
		return nil
	})
	run(func(i int) error {
		id := fmt.Sprintf("q%d-%d", pid, i)
		if err := s.PutQuarantine(ctx, store.QuarantineRecord{ID: id, Time: time.Now(), Body: []byte(id)}); err != nil {
			return err
		}
		crashtest.Ack("q", id)
		return nil
	})
	wg.Wait()
	_ = s.Close(ctx)
}

func checkCrash(t *testing.T, dir string, acks []string) {
	ctx := context.Background()
	require.NoFileExists(t, cleanPath(dir), "the child removed the marker of the last check's clean Close before it wrote")
	s, err := Open(dir, crashOpts)
	require.NoError(t, err, "reopen after the kill")
	defer func() { require.NoError(t, s.Close(ctx)) }()
	if torn := s.Recovered(); len(torn) > 0 {
		t.Logf("dropped torn tails: %+v", torn)
	}

	// Every message is stored once, sequences have no gaps.
	where := map[string]string{} // id -> "subject seq"
	for _, subject := range []string{"s0", "s1", "s2"} {
		ms, err := s.Read(ctx, subject, 0, 0)
		require.NoError(t, err)
		for i, m := range ms {
			require.Equal(t, uint64(i+1), m.Seq, "%s: gap at %d", subject, i)
			prev, twice := where[m.ID]
			require.False(t, twice, "%s stored twice: %s and %s %d", m.ID, prev, subject, m.Seq)
			where[m.ID] = fmt.Sprint(subject, " ", m.Seq)
		}
	}
	var auditMax uint64
	accepted := map[string]string{} // id -> subject
	g, err := s.LoadGroup(ctx, crashGroup)
	require.NoError(t, err)
	retried := 0
	for _, a := range acks {
		f := strings.Fields(a)
		switch f[0] {
		case "msg":
			require.Equal(t, f[1]+" "+f[2], where[f[3]], "acknowledged message %s", f[3])
			m, err := s.Lookup(ctx, f[3])
			require.NoError(t, err)
			require.Equal(t, f[1], m.Subject)
			if m.IdemKey != "" && retried < 20 {
				retried++
				retry := store.Message{Subject: m.Subject, ID: "retry-" + m.ID, Time: time.Now(), IdemKey: m.IdemKey, IdemExpires: time.Now().Add(time.Hour)}
				got, dup, err := s.Append(ctx, retry)
				require.NoError(t, err)
				require.True(t, dup, "a retry after the crash is still a duplicate")
				require.Equal(t, m.ID, got.ID)
			}
		case "accepted":
			require.Equal(t, f[1]+" "+f[2], where[f[3]], "accepted message %s", f[3])
			accepted[f[3]] = f[1]
		case "audit":
			seq, _ := strconv.ParseUint(f[1], 10, 64)
			auditMax = max(auditMax, seq)
		case "done":
			seq, _ := strconv.ParseUint(f[1], 10, 64)
			require.True(t, seq <= g.Floor || contains(g.Done, seq), "acknowledged MarkDone %d (floor %d)", seq, g.Floor)
		case "kv":
			v, err := s.Get(ctx, "crash", f[1])
			require.NoError(t, err, "acknowledged Put %s", f[1])
			require.Equal(t, f[1], string(v))
		case "q":
			_, err := s.GetQuarantine(ctx, f[1])
			require.NoError(t, err, "acknowledged quarantine %s", f[1])
		}
	}
	last, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, last.Seq, auditMax)
	recs, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.NoError(t, store.VerifyChain(cp, recs))
	// Every acknowledged AppendAccepted has its acceptance record in the
	// chain, exactly once, also those the crash kept from the audit log.
	records := map[string]int{}
	for _, r := range recs {
		if r.Type == "accepted" {
			records[r.MessageID]++
			require.Equal(t, "p-"+r.MessageID, r.Principal)
			require.Equal(t, where[r.MessageID][:2], r.Subject, "record of %s", r.MessageID)
		}
	}
	for id := range accepted {
		require.Equal(t, 1, records[id], "acceptance record of acknowledged message %s", id)
	}
	for id, n := range records {
		require.Equal(t, 1, n, "acceptance records of %s", id)
	}
	n, err := VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(len(recs)), n)
}

func contains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
