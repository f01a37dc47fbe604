package wal

// CommitStats counts the group commits of a store's logs since Open: how
// many batches were written (one write and, unless SyncNone, one fsync
// each) and how many records they held. Records/Batches is the mean
// batch size: for messages, the number of appends that shared an fsync.
type CommitStats struct {
	// MessageBatches and MessageRecords cover every subject's log.
	MessageBatches, MessageRecords uint64
	// AuditBatches and AuditRecords cover the audit log.
	AuditBatches, AuditRecords uint64
}

// CommitStats returns the counts so far. It is safe to call at any time
// and takes no log's lock; the counts of a batch being written may be
// included or not.
func (s *Store) CommitStats() CommitStats {
	var c CommitStats
	s.msgs.mu.RLock()
	for _, sub := range s.msgs.list {
		c.MessageBatches += sub.w.batches.Load()
		c.MessageRecords += sub.w.records.Load()
	}
	s.msgs.mu.RUnlock()
	if w := s.audit.w; w != nil {
		c.AuditBatches, c.AuditRecords = w.batches.Load(), w.records.Load()
	}
	return c
}
