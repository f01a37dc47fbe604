package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// The audit log of a node is its own stream, whose sequence is the
// record's Seq: each node keeps one hash chain, and VerifyAudit checks
// every chain of the prefix.

// AppendAudit implements store.AuditLog. Each record is published
// expecting the stream's last sequence to be the one before its Seq, so a
// record that does not continue the chain is refused by JetStream itself.
func (s *Store) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	last, _, err := s.AuditHead(ctx)
	if err != nil {
		return err
	}
	for i, r := range recs {
		if r.Seq != last.Seq+1+uint64(i) {
			return fmt.Errorf("jetstream: audit record seq %d does not continue the log at %d", r.Seq, last.Seq+uint64(i))
		}
	}
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := s.js.Publish(ctx, s.auditSubject(s.opts.Node), b,
			jetstream.WithExpectStream(s.auditStream(s.opts.Node)), jetstream.WithExpectLastSequence(r.Seq-1)); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// ReadAudit implements store.AuditLog for this node's chain.
func (s *Store) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	return readAudit(ctx, s.audit, from, limit, s.fail)
}

// AuditHead implements store.AuditLog for this node's chain. Audit
// records are not trimmed, so the checkpoint is always zero.
func (s *Store) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	if err := s.begin(ctx); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	raw, err := s.audit.GetLastMsgForSubject(ctx, s.auditSubject(s.opts.Node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return store.AuditRecord{}, store.Checkpoint{}, nil
	}
	if err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, s.fail(err)
	}
	r, err := decodeAudit(raw)
	return r, store.Checkpoint{}, err
}

func readAudit(ctx context.Context, st jetstream.Stream, from uint64, limit int, fail func(error) error) ([]store.AuditRecord, error) {
	var out []store.AuditRecord
	filter := st.CachedInfo().Config.Subjects[0]
	for seq := max(from, 1); limit <= 0 || len(out) < limit; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fail(err)
		}
		r, err := decodeAudit(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		seq = raw.Sequence + 1
	}
	return out, nil
}

func decodeAudit(raw *jetstream.RawStreamMsg) (store.AuditRecord, error) {
	var r store.AuditRecord
	if err := json.Unmarshal(raw.Data, &r); err != nil {
		return r, &store.CorruptError{File: raw.Subject, Offset: int64(raw.Sequence), Reason: "audit record does not decode: " + err.Error()}
	}
	return r, nil
}

// ChainReport is the verification of one node's audit chain.
type ChainReport struct {
	// Node is the node whose chain this is.
	Node string
	// Records is how many records verified.
	Records uint64
	// Head is the last verified record.
	Head store.Checkpoint
	// Err is nil when the whole chain verified; otherwise a
	// *store.ChainError (a gap, a changed or reordered record) or the
	// failure that stopped the reading.
	Err error
}

// VerifyAudit reads and verifies every node's audit chain under prefix
// (default "PIGEON"), without any Pigeon node running. It returns one
// report per chain, ordered by node; err is set only when the chains could
// not be listed.
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
		out = append(out, verifyChain(ctx, js, name, node))
	}
	if err := names.Err(); err != nil {
		return out, err
	}
	sortReports(out)
	return out, nil
}

func verifyChain(ctx context.Context, js jetstream.JetStream, name, node string) ChainReport {
	rep := ChainReport{Node: node}
	st, err := js.Stream(ctx, name)
	if err != nil {
		rep.Err = err
		return rep
	}
	var v store.Verifier
	for from := uint64(1); ; {
		recs, err := readAudit(ctx, st, from, 1000, func(err error) error { return err })
		if err != nil {
			rep.Err = err
			break
		}
		for i := range recs {
			if err := v.Next(&recs[i]); err != nil {
				rep.Err = err
				break
			}
		}
		if rep.Err != nil || len(recs) == 0 {
			break
		}
		from = recs[len(recs)-1].Seq + 1
	}
	rep.Records, rep.Head = v.Count(), v.Head()
	return rep
}

func sortReports(rs []ChainReport) {
	slices.SortFunc(rs, func(a, b ChainReport) int { return strings.Compare(a.Node, b.Node) })
}
