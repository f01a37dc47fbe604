package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// The audit log of a node is its own stream: each node keeps one hash
// chain, and VerifyAudit checks every chain of the prefix. One stream
// message holds one AppendAudit batch (a JSON array of records, its first
// Seq in a header), so a batch is kept whole or not at all. Retention
// (audit_trim.go) keeps the node's checkpoint in the <P>_audit bucket;
// every reader skips the records at or before it.

const hdrAuditFirst = "Pigeon-Audit-First"

// AppendAudit implements store.AuditLog. The batch is published expecting
// the stream's last message to be the one the head was read from, so two
// writers of one chain cannot interleave.
func (s *Store) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	head, streamSeq, err := s.chainHead(ctx)
	if err != nil {
		return err
	}
	if err := fitsChain(head, len(recs)); err != nil {
		return err
	}
	for i, r := range recs {
		if r.Seq != head.Seq+1+uint64(i) {
			return fmt.Errorf("jetstream: audit record seq %d does not continue the log at %d", r.Seq, head.Seq+uint64(i))
		}
	}
	// Kept in UTC, as store.Verifier requires of a stored record (the hash
	// covers the instant alone, which the zone does not change).
	utc := make([]store.AuditRecord, len(recs))
	for i, r := range recs {
		r.Time = r.Time.UTC()
		utc[i] = r
	}
	return s.fail(ctx, s.publishAudit(ctx, utc, streamSeq))
}

// ChainAudit implements store.AuditChainer: it chains recs onto the
// stream's actual head, and chains them again onto the new head when
// another batch got there first. A batch whose publish timed out may
// still have been kept; the next batch then chains after it, so the chain
// stays whole either way (such records are in the chain although the
// engine counted them lost).
//
// Only another writer of this node's chain (a second process given its
// name) or a replica behind (the head is read with a direct get) makes a
// try fail: every later try reads the head from the stream's leader, and
// they pause as contended compare-and-set writes do (casRetry), up to
// chainTries tries or until ctx ends; then it fails with a
// *ContendedError, none of recs in the chain.
func (s *Store) ChainAudit(ctx context.Context, recs []store.AuditRecord) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	return casRetryN(ctx, s.auditStream(s.opts.Node), s.auditSubject(s.opts.Node), chainTries, func(leader bool) (bool, error) {
		head, streamSeq, err := s.chainHeadFrom(ctx, leader)
		if err != nil {
			return false, err
		}
		if err := fitsChain(head, len(recs)); err != nil {
			return false, err
		}
		seq, prev := head.Seq, head.Hash
		if seq == 0 {
			prev = store.Genesis
		}
		for i := range recs {
			r := &recs[i]
			seq++
			r.Seq, r.Time, r.PrevHash = seq, r.Time.UTC(), prev
			if r.ID == "" || strings.HasPrefix(r.ID, "aud_") {
				r.ID = "aud_" + strconv.FormatUint(seq, 10)
			}
			r.Hash = r.ComputeHash()
			prev = r.Hash
		}
		if s.chainRaced != nil {
			s.chainRaced()
		}
		err = s.publishAudit(ctx, recs, streamSeq)
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return false, nil
		}
		return err == nil, s.fail(ctx, err)
	})
}

// chainTries bounds the tries of one ChainAudit: with casRetry's pauses,
// about two seconds of other writers winning every time.
const chainTries = 25

// fitsChain refuses n records after head when the last would be numbered
// past 2^64-1 (0, or on from it): only a forged chain gets there.
func fitsChain(head store.Checkpoint, n int) error {
	if head.Seq > math.MaxUint64-uint64(n) {
		return fmt.Errorf("jetstream: audit chain is at %d: %d records would go past 2^64-1", head.Seq, n)
	}
	return nil
}

// publishAudit keeps recs as one stream message, expecting the stream's
// last message to be streamSeq.
func (s *Store) publishAudit(ctx context.Context, recs []store.AuditRecord, streamSeq uint64) error {
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(s.auditSubject(s.opts.Node))
	msg.Data = b
	msg.Header.Set(hdrAuditFirst, strconv.FormatUint(recs[0].Seq, 10))
	_, err = s.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(s.auditStream(s.opts.Node)), jetstream.WithExpectLastSequence(streamSeq))
	return err
}

// ReadAudit implements store.AuditLog for this node's chain: the records
// after the checkpoint.
func (s *Store) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	cp, _, err := s.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	if cp.Seq == math.MaxUint64 {
		return nil, nil // nothing after the last sequence there is
	}
	return readAudit(ctx, s.audit, max(from, cp.Seq+1), limit, func(err error) error { return s.fail(ctx, err) })
}

// AuditHead implements store.AuditLog for this node's chain: the last
// record (zero once retention removed every record) and the checkpoint
// of the last record retention removed.
func (s *Store) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	if err := s.begin(ctx); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	// The last record first: a trim writes its checkpoint before it
	// purges, so the checkpoint read next is at least as new.
	last, _, err := s.auditHead(ctx)
	if err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	cp, _, err := s.checkpoint(ctx)
	if err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	if last.Seq <= cp.Seq {
		last = store.AuditRecord{} // trimmed; its message is not purged yet
	}
	return last, cp, nil
}

// chainHead returns what the next batch continues: the stream's last
// record or, when retention purged every message, the checkpoint; and the
// stream sequence the next publish expects last.
func (s *Store) chainHead(ctx context.Context) (store.Checkpoint, uint64, error) {
	return s.chainHeadFrom(ctx, false)
}

// chainHeadFrom is chainHead, with leader the stream's last record read
// from its leader, which is never behind.
func (s *Store) chainHeadFrom(ctx context.Context, leader bool) (store.Checkpoint, uint64, error) {
	last, streamSeq, err := s.auditHeadFrom(ctx, leader)
	if err != nil || last.Seq != 0 {
		return store.Checkpoint{Seq: last.Seq, Hash: last.Hash}, streamSeq, err
	}
	cp, _, err := s.checkpoint(ctx)
	return cp, streamSeq, err
}

// auditHead returns the stream's last record (zero when the stream holds
// none) and the stream sequence a publish after it expects last.
func (s *Store) auditHead(ctx context.Context) (store.AuditRecord, uint64, error) {
	return s.auditHeadFrom(ctx, false)
}

// auditHeadFrom is auditHead, with leader read from the stream's leader.
func (s *Store) auditHeadFrom(ctx context.Context, leader bool) (store.AuditRecord, uint64, error) {
	deadline := time.Now().Add(s.opts.Timeout)
	for {
		raw, err := s.lastAudit(ctx, leader)
		if err == nil {
			recs, err := decodeAudit(raw)
			if err != nil || len(recs) == 0 {
				return store.AuditRecord{}, 0, err
			}
			return recs[len(recs)-1], raw.Sequence, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return store.AuditRecord{}, 0, s.fail(ctx, err)
		}
		// The stream is new, or retention purged every message: its last
		// sequence stays after a purge, and the next publish expects it.
		info, err := s.audit.Info(ctx)
		if err != nil {
			return store.AuditRecord{}, 0, s.fail(ctx, err)
		}
		if info.State.Msgs == 0 {
			return store.AuditRecord{}, info.State.LastSeq, nil
		}
		// A replica behind the leader answered the get: chaining onto the
		// checkpoint now would skip the messages the leader has.
		if time.Now().After(deadline) {
			return store.AuditRecord{}, 0, fmt.Errorf("%w: jetstream: the last message of stream %s cannot be read", store.ErrNoQuorum, s.auditStream(s.opts.Node))
		}
		select {
		case <-ctx.Done():
			return store.AuditRecord{}, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastAudit reads the last message of this node's audit stream: with a
// direct get, or from the stream's leader.
func (s *Store) lastAudit(ctx context.Context, leader bool) (*jetstream.RawStreamMsg, error) {
	if !leader {
		return direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
			return s.audit.GetLastMsgForSubject(ctx, s.auditSubject(s.opts.Node))
		})
	}
	js, err := s.nc.JetStream(nats.Context(ctx))
	if err != nil {
		return nil, err
	}
	raw, err := js.GetLastMsg(s.auditStream(s.opts.Node), s.auditSubject(s.opts.Node), nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return nil, jetstream.ErrMsgNotFound
	}
	return (*jetstream.RawStreamMsg)(raw), err
}

// readAudit reads records with Seq >= from: it finds the stream message
// holding from by bisection on their first sequences, then reads on.
func readAudit(ctx context.Context, st jetstream.Stream, from uint64, limit int, fail func(error) error) ([]store.AuditRecord, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fail(err)
	}
	filter := info.Config.Subjects[0]
	get := func(seq uint64) (*jetstream.RawStreamMsg, error) {
		raw, err := direct(ctx, 5*time.Second, func() (*jetstream.RawStreamMsg, error) {
			return st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		return raw, fail(err)
	}
	lo, hi := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	for lo < hi { // the last message whose first record is <= from
		mid := lo + (hi-lo+1)/2
		raw, err := get(mid)
		if err != nil {
			return nil, err
		}
		if raw == nil || firstSeq(raw) > from {
			hi = mid - 1
		} else {
			lo = mid
		}
	}
	var out []store.AuditRecord
	for seq := lo; limit <= 0 || len(out) < limit; {
		raw, err := get(seq)
		if err != nil {
			return nil, err
		}
		if raw == nil {
			break
		}
		recs, err := decodeAudit(raw)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Seq >= from && (limit <= 0 || len(out) < limit) {
				out = append(out, r)
			}
		}
		if raw.Sequence == math.MaxUint64 {
			break // the stream's last sequence there is
		}
		seq = raw.Sequence + 1
	}
	return out, nil
}

func firstSeq(raw *jetstream.RawStreamMsg) uint64 {
	n, _ := strconv.ParseUint(raw.Header.Get(hdrAuditFirst), 10, 64)
	return n
}

func decodeAudit(raw *jetstream.RawStreamMsg) ([]store.AuditRecord, error) {
	var recs []store.AuditRecord
	if err := json.Unmarshal(raw.Data, &recs); err != nil {
		return nil, &store.CorruptError{File: raw.Subject, Offset: int64(raw.Sequence), Reason: "audit batch does not decode: " + err.Error()}
	}
	return recs, nil
}

// ChainReport is the verification of one node's audit chain.
type ChainReport struct {
	// Node is the node whose chain this is.
	Node string
	// From is the checkpoint the chain verified from: the last record
	// audit retention removed (zero when it removed none).
	From store.Checkpoint
	// Records is how many records after From verified.
	Records uint64
	// Head is the last verified record.
	Head store.Checkpoint
	// Err is nil when the whole chain verified; otherwise a
	// *store.ChainError (a gap, a changed or reordered record) or the
	// failure that stopped the reading.
	Err error
}

// VerifyAudit reads and verifies every node's audit chain under prefix
// (default "PIGEON"), without any Pigeon node running: each from the
// node's checkpoint in the <P>_audit bucket when retention trimmed it, so
// a trimmed chain verifies while a gap, a changed or a reordered record
// after the checkpoint does not. It returns one report per chain, ordered
// by node; err is set only when the chains could not be listed.
func VerifyAudit(ctx context.Context, nc *nats.Conn, prefix string) ([]ChainReport, error) {
	if prefix == "" {
		prefix = "PIGEON"
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var out []ChainReport
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(strings.ToLower(prefix)+".a.*"))
	for name := range names.Name() {
		node, ok := strings.CutPrefix(name, prefix+"_A_")
		if !ok {
			continue
		}
		out = append(out, verifyChain(ctx, nc, js, prefix, name, node))
	}
	if err := names.Err(); err != nil {
		return out, err
	}
	sortReports(out)
	return out, nil
}

// verifyChain verifies one node's chain from its checkpoint. A trim that
// runs meanwhile may purge what it was reading: when the chain fails and
// the checkpoint has moved, it verifies again from the new one.
func verifyChain(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, prefix, name, node string) ChainReport {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return ChainReport{Node: node, Err: err}
	}
	for tries := 1; ; tries++ {
		cp, _, err := readCheckpoint(ctx, nc, prefix, node)
		if err != nil {
			return ChainReport{Node: node, Err: err}
		}
		rep := verifyFrom(ctx, st, node, cp)
		if rep.Err == nil || tries == 3 {
			return rep
		}
		if now, _, err := readCheckpoint(ctx, nc, prefix, node); err != nil || now == cp {
			return rep
		}
	}
}

// verifyFrom verifies the records of st after cp; the record at cp, when
// its message is still there, must be the one cp names.
func verifyFrom(ctx context.Context, st jetstream.Stream, node string, cp store.Checkpoint) ChainReport {
	rep := ChainReport{Node: node, From: cp}
	v := store.Verifier{From: cp}
	for from := max(cp.Seq, 1); ; {
		recs, err := readAudit(ctx, st, from, 1000, func(err error) error { return err })
		if err != nil {
			rep.Err = err
			break
		}
		for i := range recs {
			if recs[i].Seq <= cp.Seq {
				err = matchCheckpoint(&recs[i], cp)
			} else {
				err = v.Next(&recs[i])
			}
			if err != nil {
				rep.Err = err
				break
			}
		}
		if rep.Err != nil || len(recs) == 0 || recs[len(recs)-1].Seq == math.MaxUint64 {
			break // the record after 2^64-1 would be read from 0: the chain's start again
		}
		from = recs[len(recs)-1].Seq + 1
	}
	rep.Records, rep.Head = v.Count(), v.Head()
	return rep
}

func sortReports(rs []ChainReport) {
	slices.SortFunc(rs, func(a, b ChainReport) int { return strings.Compare(a.Node, b.Node) })
}
