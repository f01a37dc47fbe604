package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

func requireGroup(t *testing.T, s store.Store, key store.GroupKey, want store.GroupState) {
	t.Helper()
	got, err := s.LoadGroup(t.Context(), key)
	require.NoError(t, err, "LoadGroup %v", key)
	require.Equal(t, normGroup(want), normGroup(got), "LoadGroup %v", key)
}

func (su *suite) testProgress(t *testing.T) {
	t.Run("MarkDoneBatch", func(t *testing.T) {
		s := su.store(t)
		bp, ok := s.(store.BatchProgress)
		if !ok {
			t.Skip("the store does not batch progress")
		}
		ctx := t.Context()
		k := store.GroupKey{Subject: "s", Group: "batch"}
		require.NoError(t, bp.MarkDoneBatch(ctx, k, []uint64{3, 1, 5, 2}))
		require.NoError(t, bp.MarkDoneBatch(ctx, k, []uint64{1, 3}), "marking done again is a no-op")
		require.NoError(t, bp.MarkDoneBatch(ctx, k, nil))
		g, err := s.LoadGroup(ctx, k)
		require.NoError(t, err)
		require.Equal(t, uint64(3), g.Floor)
		require.Equal(t, []uint64{5}, g.Done)
	})
	t.Run("MarkDone", func(t *testing.T) {
		cases := []struct {
			name  string
			seqs  []uint64
			floor uint64
			done  []uint64
		}{
			{"never marked", nil, 0, nil},
			{"in order", []uint64{1, 2, 3}, 3, nil},
			{"a gap waits", []uint64{2, 3}, 0, []uint64{2, 3}},
			{"the gap fills", []uint64{3, 1, 2}, 3, nil},
			{"out of order", []uint64{5, 3, 4, 1, 2}, 5, nil},
			{"partly filled", []uint64{1, 4, 6, 2}, 2, []uint64{4, 6}},
			{"repeats are no-ops", []uint64{2, 2, 1, 1, 2}, 2, nil},
			{"repeats above the floor are no-ops", []uint64{5, 5, 3, 3}, 0, []uint64{3, 5}},
			{"done is kept sorted", []uint64{10, 7, 8}, 0, []uint64{7, 8, 10}},
			{"0 is below every floor", []uint64{0}, 0, nil},
		}
		// One store for all cases: groups must not see each other.
		s := su.store(t)
		for _, c := range cases {
			for _, seq := range c.seqs {
				require.NoError(t, s.MarkDone(t.Context(), store.GroupKey{Subject: "s", Group: c.name}, seq))
			}
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				requireGroup(t, s, store.GroupKey{Subject: "s", Group: c.name}, store.GroupState{Floor: c.floor, Done: c.done})
			})
		}
	})

	t.Run("GroupsAreIndependent", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		k1 := store.GroupKey{Subject: "a", Group: "g"}
		k2 := store.GroupKey{Subject: "b", Group: "g"}
		k3 := store.GroupKey{Subject: "a", Group: "h"}
		require.NoError(t, s.MarkDone(ctx, k1, 1))
		require.NoError(t, s.MarkDone(ctx, k2, 2))
		require.NoError(t, s.MarkAttempt(ctx, k3, 1, 3))
		requireGroup(t, s, k1, store.GroupState{Floor: 1})
		requireGroup(t, s, k2, store.GroupState{Done: []uint64{2}})
		requireGroup(t, s, k3, store.GroupState{Attempts: map[uint64]int{1: 3}})
	})

	t.Run("Attempts", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		k := store.GroupKey{Subject: "a", Group: "g"}
		attempt := func(seq uint64, n int) { require.NoError(t, s.MarkAttempt(ctx, k, seq, n)) }
		done := func(seq uint64) { require.NoError(t, s.MarkDone(ctx, k, seq)) }

		attempt(3, 1)
		attempt(3, 2)
		attempt(4, 1)
		attempt(5, 1)
		requireGroup(t, s, k, store.GroupState{Attempts: map[uint64]int{3: 2, 4: 1, 5: 1}})

		done(3)
		requireGroup(t, s, k, store.GroupState{Done: []uint64{3}, Attempts: map[uint64]int{4: 1, 5: 1}})

		done(1)
		done(2)
		requireGroup(t, s, k, store.GroupState{Floor: 3, Attempts: map[uint64]int{4: 1, 5: 1}})

		attempt(2, 5) // below the floor
		attempt(7, 1)
		done(7)
		attempt(7, 2) // done above the floor
		requireGroup(t, s, k, store.GroupState{Floor: 3, Done: []uint64{7}, Attempts: map[uint64]int{4: 1, 5: 1}})

		done(4)
		done(5)
		requireGroup(t, s, k, store.GroupState{Floor: 5, Done: []uint64{7}})
	})

	t.Run("LoadGroupReturnsACopy", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		k := store.GroupKey{Subject: "a", Group: "g"}
		require.NoError(t, s.MarkDone(ctx, k, 3))
		require.NoError(t, s.MarkAttempt(ctx, k, 4, 1))
		want := store.GroupState{Done: []uint64{3}, Attempts: map[uint64]int{4: 1}}

		got, err := s.LoadGroup(ctx, k)
		require.NoError(t, err)
		got.Floor = 99
		got.Done[0] = 99
		got.Attempts[4] = 99
		got.Attempts[8] = 1
		requireGroup(t, s, k, want)
	})
}

func (su *suite) testQuarantine(t *testing.T) {
	s := su.store(t)
	ctx := t.Context()
	_, err := s.GetQuarantine(ctx, "q1")
	require.ErrorIs(t, err, store.ErrNotFound)
	list, err := s.ListQuarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Empty(t, list)

	rec := func(id string, d time.Duration) store.QuarantineRecord {
		return store.QuarantineRecord{
			ID: id, Time: at(d), Subject: "payments.authorize", Principal: "svc-checkout",
			ContractID: "ctr-1", PolicyID: "pol-1", SchemaID: "payment.authorization.v1",
			MessageID: "msg-" + id, Code: "SCHEMA_INVALID", Gate: "schema", Reason: "amount: required",
			Body: []byte(`{"card":"[REDACTED]","id":"` + id + `"}`),
		}
	}
	// Put out of time order: the list must still be oldest first.
	q1, q2, q3 := rec("q1", 2*time.Second), rec("q2", 0), rec("q3", time.Second)
	for _, r := range []store.QuarantineRecord{q1, q2, q3} {
		in := r
		in.Body = append([]byte(nil), r.Body...)
		require.NoError(t, s.PutQuarantine(ctx, in))
		in.Body[0] = 'X' // the caller reuses its buffer
	}

	t.Run("Get", func(t *testing.T) {
		for _, want := range []store.QuarantineRecord{q1, q2, q3} {
			got, err := s.GetQuarantine(ctx, want.ID)
			require.NoError(t, err)
			require.Equal(t, normQuarantine(want), normQuarantine(got))
			got.Body[0] = 'Y'
		}
		got, err := s.GetQuarantine(ctx, "q1")
		require.NoError(t, err)
		require.Equal(t, normQuarantine(q1), normQuarantine(got), "a returned body was changed")
	})

	t.Run("List", func(t *testing.T) {
		cases := []struct {
			name  string
			since time.Time
			max   int
			want  []store.QuarantineRecord
		}{
			{"all, oldest first", time.Time{}, 0, []store.QuarantineRecord{q2, q3, q1}},
			{"negative max is no limit", time.Time{}, -1, []store.QuarantineRecord{q2, q3, q1}},
			{"max", time.Time{}, 2, []store.QuarantineRecord{q2, q3}},
			{"since is inclusive", at(time.Second), 0, []store.QuarantineRecord{q3, q1}},
			{"since and max", at(time.Second), 1, []store.QuarantineRecord{q3}},
			{"since after the last", at(time.Hour), 0, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got, err := s.ListQuarantine(ctx, c.since, c.max)
				require.NoError(t, err)
				require.Equal(t, normQuarantine(c.want...), normQuarantine(got...))
			})
		}
	})

	t.Run("Replace", func(t *testing.T) {
		released := q3
		released.Released = true
		released.ReleasedBy = "admin"
		released.ReleasedAt = at(time.Minute)
		released.ReleasedAs = "msg-republished"
		require.NoError(t, s.PutQuarantine(ctx, released))
		got, err := s.GetQuarantine(ctx, "q3")
		require.NoError(t, err)
		require.Equal(t, normQuarantine(released), normQuarantine(got))
		list, err := s.ListQuarantine(ctx, time.Time{}, 0)
		require.NoError(t, err)
		require.Equal(t, normQuarantine(q2, released, q1), normQuarantine(list...))
	})
}

func (su *suite) testAudit(t *testing.T) {
	t.Run("Chain", func(t *testing.T) {
		recs := Chain(5)
		require.Len(t, recs, 5)
		require.Equal(t, store.Genesis, recs[0].PrevHash)
		for i, r := range recs {
			require.Equal(t, uint64(i+1), r.Seq)
		}
		require.NoError(t, store.VerifyChain(store.Checkpoint{}, recs))
		require.Equal(t, recs, Chain(5), "Chain is deterministic")

		cp := store.Checkpoint{Seq: recs[4].Seq, Hash: recs[4].Hash}
		more := ChainFrom(cp, 3)
		require.NoError(t, store.VerifyChain(cp, more))
		require.NoError(t, store.VerifyChain(store.Checkpoint{}, append(recs[:5:5], more...)))
		require.Equal(t, Chain(8), append(recs[:5:5], more...), "ChainFrom continues Chain")

		tamper := []struct {
			name   string
			seq    uint64 // where verification must stop
			change func(rs []store.AuditRecord) []store.AuditRecord
		}{
			{"field changed", 3, func(rs []store.AuditRecord) []store.AuditRecord { rs[2].Outcome = "accepted!"; return rs }},
			{"time changed", 2, func(rs []store.AuditRecord) []store.AuditRecord { rs[1].Time = rs[1].Time.Add(1); return rs }},
			{"hash rewritten", 4, func(rs []store.AuditRecord) []store.AuditRecord {
				rs[2].Outcome = "forged"
				rs[2].Hash = rs[2].ComputeHash()
				return rs
			}},
			{"record removed", 4, func(rs []store.AuditRecord) []store.AuditRecord { return append(rs[:2], rs[3:]...) }},
			{"records swapped", 4, func(rs []store.AuditRecord) []store.AuditRecord { rs[2], rs[3] = rs[3], rs[2]; return rs }},
		}
		for _, c := range tamper {
			t.Run(c.name, func(t *testing.T) {
				err := store.VerifyChain(store.Checkpoint{}, c.change(Chain(5)))
				require.ErrorIs(t, err, store.ErrTampered)
				var ce *store.ChainError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, c.seq, ce.Seq)
			})
		}
	})

	t.Run("AppendAndRead", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		last, cp, err := s.AuditHead(ctx)
		require.NoError(t, err)
		require.Equal(t, normAudit(store.AuditRecord{}), normAudit(last), "head of an empty log")
		require.Equal(t, store.Checkpoint{}, cp)
		got, err := s.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		require.Empty(t, got)

		recs := Chain(5)
		require.NoError(t, s.AppendAudit(ctx))
		require.NoError(t, s.AppendAudit(ctx, recs[:3]...))
		require.NoError(t, s.AppendAudit(ctx, recs[3:]...))

		last, cp, err = s.AuditHead(ctx)
		require.NoError(t, err)
		require.Equal(t, normAudit(recs[4]), normAudit(last))
		require.Equal(t, store.Checkpoint{}, cp)

		cases := []struct {
			name string
			from uint64
			max  int
			want []store.AuditRecord
		}{
			{"from 0 reads all", 0, 0, recs},
			{"from 1 reads all", 1, 0, recs},
			{"negative max is no limit", 1, -1, recs},
			{"from the middle", 3, 0, recs[2:]},
			{"with max", 2, 2, recs[1:3]},
			{"max beyond the end", 4, 10, recs[3:]},
			{"past the last", 6, 0, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got, err := s.ReadAudit(ctx, c.from, c.max)
				require.NoError(t, err)
				require.Equal(t, normAudit(c.want...), normAudit(got...))
			})
		}

		t.Run("what is read back verifies", func(t *testing.T) {
			got, err := s.ReadAudit(ctx, cp.Seq+1, 0)
			require.NoError(t, err)
			require.NoError(t, store.VerifyChain(cp, got))
			n, err := store.VerifyAudit(ctx, s)
			require.NoError(t, err)
			require.Equal(t, uint64(len(recs)), n)
			got[2].Code = "FORGED"
			require.ErrorIs(t, store.VerifyChain(cp, got), store.ErrTampered)
		})
	})

	t.Run("Continuity", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		recs := Chain(8)
		require.Error(t, s.AppendAudit(ctx, recs[1]), "the first record must have seq 1")
		require.NoError(t, s.AppendAudit(ctx, recs[:5]...))

		refused := []struct {
			name string
			recs []store.AuditRecord
		}{
			{"a gap", []store.AuditRecord{recs[6]}},
			{"a repeat", []store.AuditRecord{recs[4]}},
			{"an old record", []store.AuditRecord{recs[0]}},
			{"a gap inside the batch", []store.AuditRecord{recs[5], recs[7]}},
			{"a repeat inside the batch", []store.AuditRecord{recs[5], recs[6], recs[6]}},
		}
		for _, c := range refused {
			t.Run(c.name, func(t *testing.T) {
				require.Error(t, s.AppendAudit(ctx, c.recs...))
				last, _, err := s.AuditHead(ctx)
				require.NoError(t, err)
				require.Equal(t, recs[4].Seq, last.Seq, "a refused batch leaves nothing behind")
				got, err := s.ReadAudit(ctx, 0, 0)
				require.NoError(t, err)
				require.Equal(t, normAudit(recs[:5]...), normAudit(got...))
			})
		}

		require.NoError(t, s.AppendAudit(ctx, recs[5:]...))
		got, err := s.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		require.Equal(t, normAudit(recs...), normAudit(got...))
	})
}

func (su *suite) testContracts(t *testing.T) {
	s := su.store(t)
	ctx := t.Context()
	_, err := s.GetContract(ctx, "c1")
	require.ErrorIs(t, err, store.ErrNotFound)

	contract := func(id string, expires time.Duration) store.ContractRecord {
		return store.ContractRecord{
			ID: id, Principal: "svc-" + id, Region: "eu-west", IssuedAt: at(-2 * time.Hour),
			ExpiresAt: at(expires), Body: []byte(`{"grants":["` + id + `"]}`),
		}
	}
	all := []store.ContractRecord{
		contract("c1", -time.Hour),
		contract("c2", -time.Nanosecond),
		contract("c3", 0), // expires exactly at base: not before it
		contract("c4", time.Hour),
	}
	for _, c := range all {
		in := c
		in.Body = append([]byte(nil), c.Body...)
		require.NoError(t, s.PutContract(ctx, in))
		in.Body[0] = 'X'
	}
	for _, want := range all {
		got, err := s.GetContract(ctx, want.ID)
		require.NoError(t, err)
		require.Equal(t, normContract(want), normContract(got))
		got.Body[0] = 'Y'
	}

	revoked := all[3]
	revoked.Revoked = true
	require.NoError(t, s.PutContract(ctx, revoked))
	got, err := s.GetContract(ctx, "c4")
	require.NoError(t, err)
	require.Equal(t, normContract(revoked), normContract(got), "PutContract replaces")

	n, err := s.DeleteExpiredContracts(ctx, base)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, id := range []string{"c1", "c2"} {
		_, err := s.GetContract(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, id)
	}
	got, err = s.GetContract(ctx, "c3")
	require.NoError(t, err)
	require.Equal(t, normContract(all[2]), normContract(got), "a body returned earlier was changed")

	n, err = s.DeleteExpiredContracts(ctx, base)
	require.NoError(t, err)
	require.Zero(t, n)
}

// testRevocationFinal: a put of a contract not revoked over a stored one
// that is revoked leaves the stored record as it was (store.ContractLog):
// a node that renews a contract before it hears of another node's
// revocation must not bring the contract back. It holds for a put that
// races the revocation and, for a durable store, after a reopen.
func (su *suite) testRevocationFinal(t *testing.T) {
	contract := func(id string, expires time.Duration, body string) store.ContractRecord {
		return store.ContractRecord{
			ID: id, Principal: "svc-" + id, Region: "eu-west", IssuedAt: at(-time.Hour),
			ExpiresAt: at(expires), Body: []byte(body),
		}
	}
	revoke := func(c store.ContractRecord) store.ContractRecord {
		c.Revoked = true
		return c
	}
	requireStored := func(t *testing.T, s store.Store, want store.ContractRecord, msg string) {
		t.Helper()
		got, err := s.GetContract(t.Context(), want.ID)
		require.NoError(t, err, msg)
		require.Equal(t, normContract(want), normContract(got), msg)
		if l, ok := s.(store.ContractLister); ok {
			all, err := l.ListContracts(t.Context(), time.Time{})
			require.NoError(t, err)
			require.Contains(t, normContracts(all...), normContract(want), "listed: %s", msg)
		}
	}

	cases := []struct {
		name string
		// before is what the store holds before the revocation: nothing,
		// or the contract not revoked.
		before []store.ContractRecord
	}{
		{"revoked over a stored contract", []store.ContractRecord{contract("c1", time.Hour, `{"v":1}`)}},
		{"revoked as first stored", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := su.store(t)
			ctx := t.Context()
			for _, c := range tc.before {
				require.NoError(t, s.PutContract(ctx, c))
			}
			revoked := revoke(contract("c1", time.Hour, `{"v":1}`))
			require.NoError(t, s.PutContract(ctx, revoked))

			// A renewal as a node that has not heard of the revocation
			// writes it: a later expiry, a new body, not revoked.
			renewed := contract("c1", 3*time.Hour, `{"v":2}`)
			require.NoError(t, s.PutContract(ctx, renewed), "a put over a revoked contract is not an error")
			requireStored(t, s, revoked, "a put not revoked brought the contract back")

			if su.f.Reopen != nil {
				s = su.reopen(t, s)
				requireStored(t, s, revoked, "after a reopen")
				require.NoError(t, s.PutContract(ctx, renewed))
				requireStored(t, s, revoked, "a put after a reopen")
			}
		})
	}

	t.Run("racing the revocation", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		const workers, each = 4, 25
		live := contract("c1", time.Hour, `{"v":1}`)
		require.NoError(t, s.PutContract(ctx, live))
		revoked := revoke(live)
		var wg sync.WaitGroup
		errs := make(chan error, workers*each+1)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					renewed := contract("c1", time.Hour+time.Duration(w*each+i+1)*time.Second, `{"v":2}`)
					errs <- s.PutContract(ctx, renewed)
				}
			})
		}
		wg.Go(func() { errs <- s.PutContract(ctx, revoked) })
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got, err := s.GetContract(ctx, "c1")
		require.NoError(t, err)
		require.True(t, got.Revoked, "a put not revoked committed after the revocation brought the contract back")
		if su.f.Reopen != nil {
			s = su.reopen(t, s)
			again, err := s.GetContract(ctx, "c1")
			require.NoError(t, err)
			require.Equal(t, normContract(got), normContract(again), "a reopen changed the revoked contract")
		}
	})
}

func (su *suite) testKV(t *testing.T) {
	s := su.store(t)
	ctx := t.Context()
	requireGet := func(bucket, key, want string) {
		t.Helper()
		got, err := s.Get(ctx, bucket, key)
		require.NoError(t, err, "Get %s/%s", bucket, key)
		require.Equal(t, want, string(got), "Get %s/%s", bucket, key)
	}
	requireMissing := func(bucket, key string) {
		t.Helper()
		_, err := s.Get(ctx, bucket, key)
		require.ErrorIs(t, err, store.ErrNotFound, "Get %s/%s", bucket, key)
	}
	requireList := func(bucket string, want map[string][]byte) {
		t.Helper()
		got, err := s.List(ctx, bucket)
		require.NoError(t, err, "List %s", bucket)
		require.Equal(t, normKV(want), normKV(got), "List %s", bucket)
	}

	requireMissing("accounts", "alice")
	requireList("accounts", nil)

	val := []byte("alice-v1")
	require.NoError(t, s.Put(ctx, "accounts", "alice", val))
	val[0] = 'X' // the caller reuses its buffer
	require.NoError(t, s.Put(ctx, "accounts", "bob", []byte("bob-v1")))
	require.NoError(t, s.Put(ctx, "roles", "alice", []byte("admin")))
	requireGet("accounts", "alice", "alice-v1")
	requireGet("roles", "alice", "admin")
	requireMissing("accounts", "carol")
	requireMissing("keys", "alice")

	require.NoError(t, s.Put(ctx, "accounts", "alice", []byte("alice-v2")))
	requireGet("accounts", "alice", "alice-v2")
	requireList("accounts", map[string][]byte{"alice": []byte("alice-v2"), "bob": []byte("bob-v1")})
	requireList("roles", map[string][]byte{"alice": []byte("admin")})

	got, err := s.Get(ctx, "accounts", "alice")
	require.NoError(t, err)
	got[0] = 'Y'
	list, err := s.List(ctx, "accounts")
	require.NoError(t, err)
	list["bob"][0] = 'Z'
	list["carol"] = []byte("nobody")
	requireList("accounts", map[string][]byte{"alice": []byte("alice-v2"), "bob": []byte("bob-v1")})

	require.NoError(t, s.Delete(ctx, "accounts", "alice"))
	requireMissing("accounts", "alice")
	requireGet("roles", "alice", "admin")
	require.NoError(t, s.Delete(ctx, "accounts", "alice"), "deleting a missing key is a no-op")
	require.NoError(t, s.Delete(ctx, "nothing", "here"))
	require.NoError(t, s.Delete(ctx, "accounts", "bob"))
	requireList("accounts", nil)

	require.NoError(t, s.Put(ctx, "accounts", "empty", nil))
	got, err = s.Get(ctx, "accounts", "empty")
	require.NoError(t, err, "an empty value is a value")
	require.Empty(t, got)

	c, ok := s.(store.KVCreator)
	if !ok {
		return
	}
	require.NoError(t, c.Create(ctx, "broker", "k", []byte("first")))
	require.ErrorIs(t, c.Create(ctx, "broker", "k", []byte("second")), store.ErrExists)
	requireGet("broker", "k", "first")
	require.ErrorIs(t, c.Create(ctx, "accounts", "empty", []byte("x")), store.ErrExists, "an empty value is a value")
	require.NoError(t, s.Delete(ctx, "broker", "k"))
	require.NoError(t, c.Create(ctx, "broker", "k", []byte("again")), "a deleted key has no value")
	requireGet("broker", "k", "again")
}

func (su *suite) testListContracts(t *testing.T) {
	s := su.store(t)
	if _, ok := s.(store.ContractLister); !ok {
		t.Skip("the store does not list contracts")
	}
	ctx := t.Context()
	list := func(s store.Store, after time.Time) []store.ContractRecord {
		t.Helper()
		got, err := s.(store.ContractLister).ListContracts(ctx, after)
		require.NoError(t, err, "ListContracts %v", after)
		return got
	}
	require.Empty(t, list(s, time.Time{}), "an empty store")

	contract := func(id, principal string, expires time.Duration) store.ContractRecord {
		return store.ContractRecord{
			ID: id, Principal: principal, Region: "eu-west", IssuedAt: at(-3 * time.Hour),
			ExpiresAt: at(expires), Body: []byte(`{"grants":["` + id + `"]}`),
		}
	}
	put := func(c store.ContractRecord) {
		t.Helper()
		in := c
		in.Body = append([]byte(nil), c.Body...)
		require.NoError(t, s.PutContract(ctx, in))
		if len(in.Body) > 0 {
			in.Body[0] = 'X' // the caller reuses its buffer
		}
	}
	// Put out of ID order: the list is ordered by ID.
	expired := contract("c-expired", "p1", -time.Hour)
	atCut := contract("c-at-cut", "p1", 0) // expires exactly at base
	justAfter := contract("c-just-after", "p2", time.Nanosecond)
	live := contract("c-live", "p1", time.Hour)
	revoked := contract("c-revoked", "p1", time.Hour)
	revoked.Revoked = true
	later := contract("c-later", "p2", 2*time.Hour)
	later.Body = nil
	extended := contract("c-extended", "p1", time.Hour) // was expired
	shortened := contract("c-shortened", "p2", -time.Minute)
	gone := contract("c-gone", "p1", -2*time.Hour) // deleted as expired
	for _, c := range []store.ContractRecord{later, revoked, gone, live, justAfter, atCut, expired} {
		put(c)
	}
	put(contract(extended.ID, extended.Principal, -time.Hour))
	put(extended)
	put(contract(shortened.ID, shortened.Principal, time.Hour))
	put(shortened)
	n, err := s.DeleteExpiredContracts(ctx, at(-90*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 1, n)

	cases := []struct {
		name  string
		after time.Time
		want  []store.ContractRecord
	}{
		{"zero time lists all kept", time.Time{},
			[]store.ContractRecord{atCut, expired, extended, justAfter, later, live, revoked, shortened}},
		{"expiring at the cut is left out", base,
			[]store.ContractRecord{extended, justAfter, later, live, revoked}},
		{"strictly after", at(time.Hour), []store.ContractRecord{later}},
		{"after the last", at(2 * time.Hour), nil},
	}
	check := func(t *testing.T, s store.Store) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				require.Equal(t, normContracts(c.want...), normContracts(list(s, c.after)...))
			})
		}
	}
	check(t, s)

	got := list(s, base)
	require.NotEmpty(t, got)
	got[0].Body[0] = 'Y'
	got[0].Principal = "changed"
	require.Equal(t, normContracts(cases[1].want...), normContracts(list(s, base)...),
		"a returned record was changed")

	if su.f.Reopen != nil {
		t.Run("AfterReopen", func(t *testing.T) { check(t, su.reopen(t, s)) })
	}
}
