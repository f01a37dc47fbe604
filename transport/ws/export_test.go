package ws

// SetPublishBatchLimit sets how many messages the client puts in one
// frame, for benchmarks that compare batches with corked single frames;
// the returned func restores it. Not for concurrent use with sessions.
func SetPublishBatchLimit(n int) (restore func()) {
	old := publishBatchLimit
	publishBatchLimit = n
	return func() { publishBatchLimit = old }
}
