package cli

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/wal"
)

// auditDir writes a wal store in a new directory whose audit log holds
// recs, chained from Genesis; edit, when set, changes each record before
// it is chained (an attacker rewriting the chain from scratch).
func auditDir(t *testing.T, n int, edit func(*store.AuditRecord)) (string, []store.AuditRecord) {
	t.Helper()
	dir := t.TempDir()
	st, err := wal.Open(dir, nil)
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := make([]store.AuditRecord, n)
	prev := store.Genesis
	for i := range recs {
		r := &recs[i]
		*r = store.AuditRecord{Seq: uint64(i + 1), ID: "aud_" + strconv.Itoa(i+1), Type: "publish.denied", Time: t0.Add(time.Duration(i) * time.Second),
			Outcome: "deny", Code: "FORBIDDEN", Subject: "orders", Principal: "mallory-" + strconv.Itoa(i), PrevHash: prev}
		if edit != nil {
			edit(r)
		}
		r.Hash = r.ComputeHash()
		prev = r.Hash
	}
	require.NoError(t, st.AppendAudit(context.Background(), recs...))
	require.NoError(t, st.Close(context.Background()))
	return dir, recs
}

// An unkeyed hash chain proves nothing against one who can write the
// files: cut at a record's end, or rewritten from any record on with the
// hashes computed again, it verifies. `audit verify` prints the head it
// verified, and --anchor SEQ:HASH (a head noted earlier, kept apart from
// the data) makes it refuse a chain that no longer holds that record
// unchanged: the rewrite or the cut shows.
func TestAuditVerifyAnchorFindsACutOrRewrittenChain(t *testing.T) {
	whole, recs := auditDir(t, 5, nil)
	cut, _ := auditDir(t, 3, nil)
	rewritten, _ := auditDir(t, 5, func(r *store.AuditRecord) {
		if r.Seq == 2 {
			r.Principal = "alice" // the refusal put on another's name
		}
	})
	anchor := func(r store.AuditRecord) string { return strconv.FormatUint(r.Seq, 10) + ":" + r.Hash }
	tests := []struct {
		name   string
		dir    string
		anchor string
		code   int
		out    string
	}{
		{"whole, no anchor", whole, "", 0, "holds: 5 records"},
		{"cut, no anchor", cut, "", 0, "holds: 3 records"},
		{"rewritten, no anchor", rewritten, "", 0, "holds: 5 records"},
		{"whole, anchored at its head", whole, anchor(recs[4]), 0, "holds the anchored record 5"},
		{"whole, anchored before its head", whole, anchor(recs[2]), 0, "holds the anchored record 3"},
		{"cut, anchored at the old head", cut, anchor(recs[4]), 1, "ends at record 3, before the anchored record 5"},
		{"cut, anchored before the cut", cut, anchor(recs[2]), 0, "holds the anchored record 3"},
		{"rewritten, anchored at the head", rewritten, anchor(recs[4]), 1, "record 5 is not the anchored one"},
		{"rewritten, anchored before the change", rewritten, anchor(recs[0]), 0, "holds the anchored record 1"},
		{"malformed anchor", whole, "5", 2, "--anchor"},
		{"anchor hash not hex", whole, "5:xyz", 2, "--anchor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"audit", "verify", "--data", tt.dir}
			if tt.anchor != "" {
				args = append(args, "--anchor", tt.anchor)
			}
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), args, &stdout, &stderr)
			require.Equal(t, tt.code, code, "stdout %q, stderr %q", stdout.String(), stderr.String())
			require.Contains(t, stdout.String()+stderr.String(), tt.out)
		})
	}

	// The head it prints is the anchor of a later verify.
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, Main(context.Background(), []string{"audit", "verify", "--data", whole}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "head "+anchor(recs[4]))
}
