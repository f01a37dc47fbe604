package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// Audit retention. A trim moves the node's checkpoint (the seq and hash of
// the last removed record) to the last record before t, in the <P>_audit
// bucket under the node's name, and only then purges the stream messages
// whose records are all at or before it. Every reader skips records at or
// before the checkpoint, so the state a crash between the two leaves
// behind (checkpoint moved, messages still there) reads and verifies as a
// finished trim, and the next trim purges them.
//
// A batch (one stream message) is purged whole or not at all: when t falls
// inside a batch, its records before t leave the chain all the same (the
// checkpoint moves to the last of them, they are counted, ReadAudit no
// longer returns them and verification starts after them), but the
// message keeps their bytes until a later trim passes its last record.

// auditBucket is the bucket of the checkpoints, one key per node.
const auditBucket = "audit"

// TrimAuditBefore implements store.AuditTrimmer for this node's chain: it
// removes the records with a Time before t from the front of the chain
// (it stops at the first one at or after t) and returns how many. The
// checkpoint is written before anything is purged, so the remainder
// verifies from it whatever happens between the two. It refuses, removing
// nothing, to drop records that do not verify from the current
// checkpoint: retention never erases the evidence of a broken chain.
//
// Appends to the chain may run at the same time: the purge is bounded by
// the last message the trim read, so a batch appended meanwhile stays.
// Another process given the node's name may move the checkpoint between
// the trim's read and its write: the trim starts again from it, at most
// auditTrimTries times with growing pauses, and then fails with a
// *ContendedError (ErrContended), or ctx's error, nothing purged.
func (s *Store) TrimAuditBefore(ctx context.Context, t time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	if err := s.recheck(ctx); err != nil {
		return 0, err
	}
	s.trimMu.Lock()
	defer s.trimMu.Unlock()
	// A checkpoint moved since it was read (by another process of this
	// node: trimMu orders this one's) starts the trim again from it, as
	// contended compare-and-set writes do: pausing longer each time, up to
	// auditTrimTries tries or until ctx ends, then a *ContendedError with
	// nothing purged. The checkpoint is read from the bucket's leader
	// every time.
	var n int
	err := casRetryN(ctx, s.bucketName(auditBucket), s.opts.Node, auditTrimTries, func(bool) (bool, error) {
		var err error
		n, err = s.trimAudit(ctx, t)
		return casDone(err)
	})
	return n, err
}

// auditTrimTries bounds the tries of one TrimAuditBefore, as chainTries
// bounds ChainAudit's.
const auditTrimTries = chainTries

func (s *Store) trimAudit(ctx context.Context, t time.Time) (int, error) {
	cp, rev, err := s.checkpoint(ctx)
	if err != nil {
		return 0, err
	}
	v := store.Verifier{From: cp}
	var purge uint64 // the messages below it hold no record after the new checkpoint
	filter := s.auditSubject(s.opts.Node)
walk:
	for seq := uint64(1); ; {
		raw, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
			return s.audit.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return 0, s.fail(ctx, err)
		}
		recs, err := decodeAudit(raw)
		if err != nil {
			return 0, err
		}
		for i := range recs {
			r := &recs[i]
			if r.Seq <= cp.Seq { // removed by an earlier trim
				if err := matchCheckpoint(r, cp); err != nil {
					return 0, err
				}
				continue
			}
			if !r.Time.Before(t) {
				break walk
			}
			if err := v.Next(r); err != nil {
				return 0, err
			}
		}
		purge = raw.Sequence + 1
		seq = raw.Sequence + 1
	}
	if s.auditTrimRaced != nil {
		s.auditTrimRaced()
	}
	if n := v.Count(); n > 0 {
		if err := s.putCheckpoint(ctx, v.Head(), rev); err != nil {
			return 0, err
		}
	}
	if purge > 0 {
		if err := s.audit.Purge(ctx, jetstream.WithPurgeSequence(purge)); err != nil {
			return 0, s.fail(ctx, fmt.Errorf("jetstream: audit trimmed to %d, but the purge of stream %s failed (the next trim retries it): %w",
				v.Head().Seq, s.auditStream(s.opts.Node), err))
		}
	}
	return int(v.Count()), nil
}

// matchCheckpoint checks a record at or before the checkpoint that is
// still in the stream: the one at the checkpoint must be the record it
// names.
func matchCheckpoint(r *store.AuditRecord, cp store.Checkpoint) error {
	if r.Seq == cp.Seq && r.Hash != cp.Hash {
		return &store.ChainError{Seq: r.Seq, Reason: "hash does not match the checkpoint"}
	}
	return nil
}

// checkpoint returns this node's checkpoint and its revision in the
// bucket (zero when the chain was never trimmed).
func (s *Store) checkpoint(ctx context.Context) (store.Checkpoint, uint64, error) {
	cp, rev, err := readCheckpoint(ctx, s.nc, s.opts.Prefix, s.opts.Node)
	return cp, rev, s.fail(ctx, err)
}

// readCheckpoint reads node's checkpoint from the leader of the bucket's
// stream, not with a direct get that a replica a few milliseconds behind
// may answer: after a trim purged the stream, an older checkpoint would
// chain the next batch onto a removed record. A missing bucket or key is
// the zero checkpoint.
func readCheckpoint(ctx context.Context, nc *nats.Conn, prefix, node string) (store.Checkpoint, uint64, error) {
	bucket := prefix + "_" + auditBucket
	m, err := leaderLast(ctx, nc, bucket, node)
	if errors.Is(err, nats.ErrStreamNotFound) || (m == nil && err == nil) {
		return store.Checkpoint{}, 0, nil
	}
	if err != nil {
		return store.Checkpoint{}, 0, fmt.Errorf("jetstream: checkpoint of node %s: %w", node, err)
	}
	var cp store.Checkpoint
	if err := json.Unmarshal(m.Data, &cp); err != nil || cp.Seq == 0 || len(cp.Hash) != len(store.Genesis) {
		return store.Checkpoint{}, 0, &store.CorruptError{File: bucket, Offset: int64(m.Sequence), Reason: "checkpoint of node " + node + " does not decode"}
	}
	return cp, m.Sequence, nil
}

// putCheckpoint writes this node's checkpoint over revision rev (0: none
// yet); a write by someone else since fails with jetstream.ErrKeyExists
// or jetstream.ErrKeyRevisionMismatch.
func (s *Store) putCheckpoint(ctx context.Context, cp store.Checkpoint, rev uint64) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.auditCP.Create(ctx, s.opts.Node, b)
	} else {
		_, err = s.auditCP.Update(ctx, s.opts.Node, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	return s.fail(ctx, err)
}
