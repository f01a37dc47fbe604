package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestAppendHashIsComputeHash: the hash a writer appends to its buffer is
// the one ComputeHash returns, after whatever the buffer held, for records
// with and without the fields of a batch record.
func TestAppendHashIsComputeHash(t *testing.T) {
	at := time.Date(2026, 12, 5, 0, 0, 0, 1, time.UTC)
	for _, r := range []store.AuditRecord{
		{},
		{Seq: 1, ID: "aud_1", Type: "publish.accepted", Time: at, Outcome: "allow", Subject: "payments.authorize", PrevHash: store.Genesis},
		{Seq: 7, ID: "aud_7", Type: "delivery.dispatched", Time: at, Principal: "bob", Seqs: "4-9,12", Count: 7, Digest: "ab"},
	} {
		want := r.ComputeHash()
		require.Len(t, want, 64)
		for _, prefix := range []string{"", "aud_12", string(make([]byte, 100))} {
			got := r.AppendHash([]byte(prefix))
			require.Equal(t, prefix+want, string(got))
		}
	}
}
