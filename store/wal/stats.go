package wal

// CommitStats counts the group commits of a store's logs since Open: how
// many batches were written (one write and, unless SyncNone, one fsync
// each) and how many write requests they held. Requests/Batches is the
// mean batch size, the number of callers that shared an fsync.
type CommitStats struct {
	// MessageBatches and MessageRequests cover every subject's log.
	MessageBatches, MessageRequests uint64
	// AuditBatches and AuditRequests cover the audit log.
	AuditBatches, AuditRequests uint64
}

// CommitStats returns the counts so far. It is safe to call at any time
// and takes no log's lock; the counts of a batch being written may be
// included or not.
func (s *Store) CommitStats() CommitStats {
	var c CommitStats
	s.msgs.mu.RLock()
	for _, sub := range s.msgs.list {
		c.MessageBatches += sub.w.batches.Load()
		c.MessageRequests += sub.w.requests.Load()
	}
	s.msgs.mu.RUnlock()
	if w := s.audit.w; w != nil {
		c.AuditBatches, c.AuditRequests = w.batches.Load(), w.requests.Load()
	}
	return c
}
