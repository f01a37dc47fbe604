package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store/wal"
)

// The durable HTTP cell's note gives the mean group commit of the run:
// publishes per fsync of the message log and records per fsync of the
// audit log, from the counts the run added.
func TestCommitNote(t *testing.T) {
	before := wal.CommitStats{MessageBatches: 10, MessageRecords: 100, AuditBatches: 2, AuditRecords: 100}
	after := wal.CommitStats{MessageBatches: 50, MessageRecords: 1100, AuditBatches: 7, AuditRecords: 1100}
	require.Equal(t, "per fsync: 25.0 publishes (message log), 200.0 records (audit log)", commitNote(before, after))
	require.Equal(t, "per fsync: - publishes (message log), - records (audit log)", commitNote(before, before))
}
