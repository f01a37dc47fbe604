package pigeon_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestPurgeRemovedSubject: a subject removed from the catalog (the broker
// started again on a policy without it, over the same store) keeps its
// messages, and Stats lists it after the catalog's subjects, marked
// NotInCatalog. PurgeSubject refuses a principal without the admin role
// and a subject in the catalog; an admin's purge removes every message,
// writes one subject.purged record (the admin, the subject, how many),
// and a second purge removes nothing and writes nothing. The chain
// verifies, and the subject put back goes on past the purged sequences.
func TestPurgeRemovedSubject(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	orders := f.connect("orders-token", "notifications.send")
	var ids []string
	for _, key := range []string{"n-1", "n-2", "n-3"} {
		r, err := orders.Publish(ctx, demo.Notification(key))
		require.NoError(t, err)
		ids = append(ids, r.Message.ID)
	}
	require.NoError(t, f.e.Shutdown(ctx))

	next := newFixture(t, func(o *pigeon.Options) {
		o.Store, o.Now = st, f.clock.Now
		o.Catalog.Subjects = []pigeon.SubjectPolicy{*requireSubject(t, o.Catalog, "payments.authorize")}
	})
	stats := func() []pigeon.SubjectStats {
		t.Helper()
		s, err := next.e.Stats(ctx)
		require.NoError(t, err)
		return s.Subjects
	}
	require.Equal(t, []pigeon.SubjectStats{
		{Subject: "payments.authorize"},
		{Subject: "notifications.send", Messages: 3, FirstSeq: 1, LastSeq: 3, NotInCatalog: true},
	}, stats(), "the catalog's subjects, then the removed one with its messages")
	next.e.EnforceRetention(ctx)
	requireHeld(t, st, "notifications.send", 1, 3)

	admin, err := next.e.Authenticate(ctx, "admin-token")
	require.NoError(t, err)
	notAdmin, err := next.e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	auditor, err := next.e.Authenticate(ctx, "auditor-token")
	require.NoError(t, err)
	for _, p := range []*pigeon.Principal{notAdmin, auditor, nil} {
		n, err := next.e.PurgeSubject(ctx, p, "notifications.send")
		requireCode(t, err, pigeon.CodeForbidden)
		require.Zero(t, n)
	}
	n, err := next.e.PurgeSubject(ctx, admin, "payments.authorize")
	requireCode(t, err, pigeon.CodeConflict)
	require.Zero(t, n)
	requireHeld(t, st, "notifications.send", 1, 3)
	require.Empty(t, auditOf(t, next.e, pigeon.EventSubjectPurged))

	n, err = next.e.PurgeSubject(ctx, admin, "notifications.send")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	first, last, err := st.Bounds(ctx, "notifications.send")
	require.NoError(t, err)
	require.Greater(t, first, last, "every message gone")
	require.Equal(t, uint64(3), last, "the sequence stays")
	for _, id := range ids {
		_, err := st.Lookup(ctx, id)
		require.Error(t, err, "a purged message's id resolves no more")
	}
	require.Equal(t, []pigeon.SubjectStats{{Subject: "payments.authorize"}}, stats())
	recs := auditOf(t, next.e, pigeon.EventSubjectPurged)
	require.Len(t, recs, 1)
	require.Equal(t, "notifications.send", recs[0].Subject)
	require.Equal(t, demo.Administrator, recs[0].Principal)
	require.Equal(t, "3", recs[0].Ref, "how many went")
	require.Equal(t, string(pigeon.OutcomeAllow), recs[0].Outcome)

	for _, subject := range []string{"notifications.send", "never.seen"} {
		n, err = next.e.PurgeSubject(ctx, admin, subject)
		require.NoError(t, err, subject)
		require.Zero(t, n, "nothing left to purge on %s", subject)
	}
	require.Len(t, auditOf(t, next.e, pigeon.EventSubjectPurged), 1, "an empty purge writes no record")
	_, err = next.e.VerifyAudit(ctx)
	require.NoError(t, err)

	// Put back, the subject is its retention's again, and goes on past
	// the purged sequences.
	require.NoError(t, next.e.LoadCatalog(ctx, demo.Catalog()))
	_, err = next.e.PurgeSubject(ctx, admin, "notifications.send")
	requireCode(t, err, pigeon.CodeConflict)
	r, err := next.connect("orders-token", "notifications.send").Publish(ctx, demo.Notification("n-4"))
	require.NoError(t, err)
	require.Equal(t, uint64(4), r.Message.Sequence)
}

func requireSubject(t *testing.T, c *pigeon.Catalog, name string) *pigeon.SubjectPolicy {
	t.Helper()
	for i := range c.Subjects {
		if c.Subjects[i].Name == name {
			return &c.Subjects[i]
		}
	}
	t.Fatalf("no subject %s in the catalog", name)
	return nil
}

// requireHeld requires subject to hold the messages first to last in st.
func requireHeld(t *testing.T, st *memory.Store, subject string, first, last uint64) {
	t.Helper()
	f, l, err := st.Bounds(ctx, subject)
	require.NoError(t, err)
	require.Equal(t, [2]uint64{first, last}, [2]uint64{f, l}, "the messages %s holds", subject)
}

// TestPurgeRefusalsAreAudited: every refused purge writes one
// purge.denied record (outcome deny) naming the caller, the subject and
// the refusal's code, which is the code of the error returned: a caller
// without the role admin (FORBIDDEN, a nil principal's with no
// principal), a subject of the catalog (CONFLICT), no subject, and a
// store that cannot trim (BAD_REQUEST). Nothing is purged.
func TestPurgeRefusalsAreAudited(t *testing.T) {
	for _, tc := range []struct {
		name, token, subject string
		untrimmable          bool // the store hides store.SeqTrimmer
		code                 pigeon.Code
		principal            string
	}{
		{name: "no role", token: "orders-token", subject: "retired.events", code: pigeon.CodeForbidden, principal: demo.Orders},
		{name: "auditor", token: "auditor-token", subject: "retired.events", code: pigeon.CodeForbidden, principal: demo.Auditor},
		{name: "no principal", subject: "retired.events", code: pigeon.CodeForbidden},
		{name: "in the catalog", token: "admin-token", subject: "payments.authorize", code: pigeon.CodeConflict, principal: demo.Administrator},
		{name: "no subject", token: "admin-token", code: pigeon.CodeBadRequest, principal: demo.Administrator},
		{name: "store cannot trim", token: "admin-token", subject: "retired.events", untrimmable: true, code: pigeon.CodeBadRequest, principal: demo.Administrator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.New(nil)
			t.Cleanup(func() { require.NoError(t, mem.Close(ctx)) })
			_, _, err := mem.Append(ctx, store.Message{Subject: "retired.events", ID: "msg_1", Time: time.Now(), Body: []byte("{}")})
			require.NoError(t, err)
			var st store.Store = mem
			if tc.untrimmable {
				st = struct{ store.Store }{mem}
			}
			f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
			var p *pigeon.Principal
			if tc.token != "" {
				p, err = f.e.Authenticate(ctx, tc.token)
				require.NoError(t, err)
			}
			n, err := f.e.PurgeSubject(ctx, p, tc.subject)
			requireCode(t, err, tc.code)
			require.Zero(t, n)
			requireHeld(t, mem, "retired.events", 1, 1)

			recs := auditOf(t, f.e, pigeon.EventPurgeDenied)
			require.Len(t, recs, 1)
			require.Equal(t, string(pigeon.OutcomeDeny), recs[0].Outcome)
			require.Equal(t, string(tc.code), recs[0].Code)
			require.Equal(t, tc.principal, recs[0].Principal)
			require.Equal(t, tc.subject, recs[0].Subject)
			require.Empty(t, recs[0].Ref)
			require.Empty(t, auditOf(t, f.e, pigeon.EventSubjectPurged))
		})
	}
}

// TestPurgeRefusalsCoalesce: a principal without the role admin looping
// on purges is refused each time, and every refusal is observed, but the
// log takes its first refusal and one coalesced record for the rest of
// the second, naming a new subject each time or not. An admin's CONFLICTs
// keep their subject (one of the catalog's): one run per subject.
func TestPurgeRefusalsCoalesce(t *testing.T) {
	rec := newRecorder()
	f := newFixture(t, func(o *pigeon.Options) { o.Observer = rec })
	orders, err := f.e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	admin, err := f.e.Authenticate(ctx, "admin-token")
	require.NoError(t, err)
	for i := range 50 {
		_, err := f.e.PurgeSubject(ctx, orders, "retired."+strconv.Itoa(i))
		requireCode(t, err, pigeon.CodeForbidden)
	}
	for _, subject := range []string{"payments.authorize", "notifications.send", "payments.authorize"} {
		_, err := f.e.PurgeSubject(ctx, admin, subject)
		requireCode(t, err, pigeon.CodeConflict)
	}
	require.True(t, rec.snapshot(func(r *recorder) bool { return r.events[pigeon.EventPurgeDenied] == 53 }), "observers hear of every refusal")
	forbidden := func() []pigeon.AuditRecord {
		return refusedAt(t, f.e, pigeon.EventPurgeDenied, "", pigeon.CodeForbidden)
	}
	require.Len(t, forbidden(), 1, "within the second only the first is written")
	require.Len(t, refusedAt(t, f.e, pigeon.EventPurgeDenied, "", pigeon.CodeConflict), 2, "one run for each subject of the catalog")

	f.clock.Advance(time.Second)
	recs := forbidden()
	require.Len(t, recs, 2)
	require.Equal(t, "retired.0", recs[0].Subject)
	require.Equal(t, "coalesced:49", recs[1].Ref)
	require.Equal(t, "retired.49", recs[1].Subject, "the summary names the latest")
	require.Equal(t, demo.Orders, recs[1].Principal)
	conflicts := refusedAt(t, f.e, pigeon.EventPurgeDenied, "", pigeon.CodeConflict)
	require.Len(t, conflicts, 3)
	require.Equal(t, "coalesced:1", conflicts[2].Ref)
	require.Equal(t, "payments.authorize", conflicts[2].Subject)
	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestPurgeRefusedForAuditWritesNoRecord: while the audit log cannot be
// written, an admin's purge is refused with the store's code (the audit
// guard) and leaves no purge.denied record, not even one offered to
// observers: the failure is the log's, and audit.resumed says what was
// lost. A refusal judged before the guard (no role) is still offered.
func TestPurgeRefusedForAuditWritesNoRecord(t *testing.T) {
	st := &trimmerFailingAudit{Store: memory.New(nil)}
	t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
	_, _, err := st.Append(ctx, store.Message{Subject: "retired.events", ID: "msg_1", Time: time.Now(), Body: []byte("{}")})
	require.NoError(t, err)
	rec := newRecorder()
	f := newFixture(t, func(o *pigeon.Options) { o.Store, o.Observer = st, rec })
	orders, err := f.e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	admin, err := f.e.Authenticate(ctx, "admin-token")
	require.NoError(t, err)
	denied := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.events[pigeon.EventPurgeDenied]
	}

	st.fail.Store(true)
	_, err = f.e.PurgeSubject(ctx, orders, "retired.events")
	requireCode(t, err, pigeon.CodeForbidden)
	require.Equal(t, 1, denied(), "its record is offered (and lost with the log)")
	_, err = f.e.PurgeSubject(ctx, admin, "retired.events")
	requireCode(t, err, pigeon.CodeStoreFull)
	require.Equal(t, 1, denied(), "refused for the audit log: no purge.denied")
	requireHeld(t, st.Store, "retired.events", 1, 1)

	st.fail.Store(false)
	n, err := f.e.PurgeSubject(ctx, admin, "retired.events")
	require.NoError(t, err, "the log is written again")
	require.Equal(t, 1, n)
	require.Equal(t, 1, denied())
	require.Empty(t, auditOf(t, f.e, pigeon.EventPurgeDenied), "the only one was lost with the log")
	require.Len(t, auditOf(t, f.e, pigeon.EventAuditResumed), 1)
}

// trimmerFailingAudit is a memory store (a store.SeqTrimmer) whose audit
// appends fail while fail is set.
type trimmerFailingAudit struct {
	*memory.Store
	fail atomic.Bool
}

func (f *trimmerFailingAudit) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if f.fail.Load() {
		return fmt.Errorf("disk on fire: %w", store.ErrFull)
	}
	return f.Store.AppendAudit(ctx, recs...)
}
