package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
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
