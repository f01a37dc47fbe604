package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ContendedError is the error of a compare-and-set write (a consumer
// group's progress, a message's lease, a batch of a node's audit chain)
// whose ctx ended while it retried, or whose tries ran out (ChainAudit
// and TrimAuditBefore, on the node's audit checkpoint, bound them): every try found the entry changed since it read it, by
// other writers at the same time. Nothing of this write was kept; it may
// be retried. It wraps the context's error, so errors.Is(err,
// context.DeadlineExceeded) (or context.Canceled) holds, or ErrContended
// when the tries ran out.
type ContendedError struct {
	// Bucket and Key name the entry (for the audit chain: the node's
	// audit stream and its subject).
	Bucket, Key string
	// Tries is how many times the write read the entry and tried.
	Tries int
	// Err is the context's error, or ErrContended.
	Err error
}

// ErrContended is what a *ContendedError wraps when the write's bound on
// its tries, not its ctx, ended it.
var ErrContended = errors.New("jetstream: every try met another writer")

func (e *ContendedError) Error() string {
	return fmt.Sprintf("jetstream: %s key %s changed under each of %d tries: %v", e.Bucket, e.Key, e.Tries, e.Err)
}

func (e *ContendedError) Unwrap() error { return e.Err }

// casPauseMax caps the pause between two tries of a contended write.
const casPauseMax = 100 * time.Millisecond

// casRetry runs try, one read and compare-and-set of key in bucket, until
// it reports done or fails. The first try may read with a direct get,
// which a replica behind may answer; a write that finds the entry changed
// may have read such a replica, so every later try reads from the
// bucket's leader (leader), and a replica behind cannot keep the loop
// going. Only other writers can: the second try comes at once, the
// later ones after a pause, from a millisecond
// doubling to casPauseMax (jittered, so that writers that met once do
// not meet again), until ctx ends, which fails the write with a
// *ContendedError.
func casRetry(ctx context.Context, bucket, key string, try func(leader bool) (done bool, err error)) error {
	return casRetryN(ctx, bucket, key, 0, try)
}

// casRetryN is casRetry that also gives up after maxTries tries (0: no
// bound), with a *ContendedError wrapping ErrContended.
func casRetryN(ctx context.Context, bucket, key string, maxTries int, try func(leader bool) (done bool, err error)) error {
	pause := time.Millisecond
	for tries := 1; ; tries++ {
		done, err := try(tries > 1)
		if err != nil && tries > 1 && ctx.Err() != nil {
			return &ContendedError{Bucket: bucket, Key: key, Tries: tries, Err: ctx.Err()}
		}
		if err != nil || done {
			return err
		}
		if tries == maxTries {
			return &ContendedError{Bucket: bucket, Key: key, Tries: tries, Err: ErrContended}
		}
		if tries == 1 {
			continue // the second try at once, from the leader: a replica behind is the common cause
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return &ContendedError{Bucket: bucket, Key: key, Tries: tries, Err: ctx.Err()}
		case <-t.C:
		}
		pause = min(2*pause, casPauseMax)
	}
}

// casDone is the outcome of a try's compare-and-set that returned err:
// not done, and no error, when the entry was not at the revision read.
func casDone(err error) (bool, error) {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return false, nil
	}
	return err == nil, err
}
