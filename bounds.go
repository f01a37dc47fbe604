package pigeon

import "context"

// Bounds returns the first and last sequence retained on a subject (0 and
// 0 when it holds none). A pubsub subscription started at StartAt(last+1)
// receives exactly the messages accepted after the call: a consumer that
// keeps its own position starts at a known sequence this way.
func (e *Engine) Bounds(ctx context.Context, subject string) (first, last uint64, err error) {
	if e.subject(subject) == nil {
		return 0, 0, NewError(CodeSubjectNotFound, "unknown subject %q", subject)
	}
	if first, last, err = e.store.Bounds(ctx, subject); err != nil {
		return 0, 0, storeError(err)
	}
	return first, last, nil
}
