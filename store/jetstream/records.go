package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// quarantined is a quarantine record as kept: the record with its body.
type quarantined struct {
	store.QuarantineRecord
	Body []byte `json:"body,omitempty"`
}

// PutQuarantine implements store.QuarantineLog.
func (s *Store) PutQuarantine(ctx context.Context, r store.QuarantineRecord) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(quarantined{QuarantineRecord: r, Body: r.Body})
	if err != nil {
		return err
	}
	_, err = s.quarantine.Put(ctx, token(r.ID), b)
	return s.fail(ctx, err)
}

// GetQuarantine implements store.QuarantineLog.
func (s *Store) GetQuarantine(ctx context.Context, id string) (store.QuarantineRecord, error) {
	if err := s.begin(ctx); err != nil {
		return store.QuarantineRecord{}, err
	}
	b, err := getValue(ctx, s, s.quarantine, token(id))
	if err != nil {
		return store.QuarantineRecord{}, err
	}
	return s.decodeQuarantine(b)
}

func (s *Store) decodeQuarantine(b []byte) (store.QuarantineRecord, error) {
	var q quarantined
	if err := json.Unmarshal(b, &q); err != nil {
		return store.QuarantineRecord{}, &store.CorruptError{File: s.bucketName("quarantine"), Reason: err.Error()}
	}
	q.QuarantineRecord.Body = q.Body
	return q.QuarantineRecord, nil
}

// ListQuarantine implements store.QuarantineLog: it reads every record,
// so it suits the review of a quarantine, not a hot path.
func (s *Store) ListQuarantine(ctx context.Context, since time.Time, limit int) ([]store.QuarantineRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	vals, _, err := s.values(ctx, s.quarantine, "")
	if err != nil {
		return nil, err
	}
	var out []store.QuarantineRecord
	for _, b := range vals {
		r, err := s.decodeQuarantine(b)
		if err != nil {
			return nil, err
		}
		if !r.Time.Before(since) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.QuarantineRecord) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// TrimQuarantineBefore implements store.QuarantineTrimmer: it removes
// the records whose Time is before t (a release keeps the original Time).
// It reads the whole bucket, as ListQuarantine does; the engine calls it
// from its retention sweep, not a hot path. Two nodes trimming at once
// remove each record once between them; each counts what it removed.
func (s *Store) TrimQuarantineBefore(ctx context.Context, t time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	if err := s.recheck(ctx); err != nil {
		return 0, err
	}
	es, err := s.entries(ctx, s.quarantine)
	if err != nil {
		return 0, err
	}
	return s.purgeQuarantined(ctx, es, t)
}

// purgeQuarantined removes the records among es (as listed) whose Time
// is before t, each up to the revision listed: a record written again
// under its id since the listing stays.
func (s *Store) purgeQuarantined(ctx context.Context, es map[string]entry, t time.Time) (int, error) {
	n := 0
	for key, e := range es {
		r, err := s.decodeQuarantine(e.val)
		if err != nil {
			return n, err
		}
		if !r.Time.Before(t) {
			continue
		}
		purged, err := s.purgeUpTo(ctx, s.bucketName("quarantine"), key, e.rev)
		if err != nil {
			return n, err
		}
		n += min(int(purged), 1)
	}
	return n, nil
}

// PutContract implements store.ContractLog.
func (s *Store) PutContract(ctx context.Context, c store.ContractRecord) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if !c.Revoked {
		return s.putUnrevoked(ctx, c.ID, b)
	}
	rev, err := s.contracts.Put(ctx, token(c.ID), b)
	if err == nil {
		maxRev(&s.conRev, rev)
	}
	return s.fail(ctx, err)
}

// putUnrevoked writes contract id, not revoked, unless the stored one is
// revoked: a revocation is final. A node renews a contract as it holds
// it, and its watch may not have applied another node's revocation yet;
// a plain put would store the contract unrevoked again, and every node
// that loads it afterwards (restarted, or one that never held it) would
// honour it. So the write is a create, or a compare-and-set on the
// record read from the stream's leader, and a revoked record is left as
// it is (the renewing node's watch revokes its copy).
func (s *Store) putUnrevoked(ctx context.Context, id string, b []byte) error {
	key := token(id)
	for {
		_, err := s.contracts.Create(ctx, key, b)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return s.fail(ctx, err)
		}
		m, err := leaderLast(ctx, s.nc, s.bucketName("contracts"), key)
		if err != nil {
			return s.fail(ctx, err)
		}
		if m != nil {
			cur, err := s.decodeContract(m.Data)
			if err != nil || cur.Revoked {
				return err
			}
			_, err = s.contracts.Update(ctx, key, b, m.Sequence)
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
				return s.fail(ctx, err)
			}
		}
		// Changed (or removed) since the read: read again.
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// GetContract implements store.ContractLog.
func (s *Store) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	if err := s.begin(ctx); err != nil {
		return store.ContractRecord{}, err
	}
	m, err := leaderLast(ctx, s.nc, s.bucketName("contracts"), token(id))
	if err != nil {
		return store.ContractRecord{}, s.fail(ctx, err)
	}
	if m == nil {
		return store.ContractRecord{}, store.ErrNotFound
	}
	c, err := s.decodeContract(m.Data)
	if err == nil && c.Revoked {
		// A revocation this node read counts as one it knows of: a
		// barrier waits for every live node to have applied it. A
		// revocation retried after CLUSTER_UNCONFIRMED on a node that
		// loads the contract (revoked) has nothing to write, and its
		// watch may not have delivered the revocation yet.
		maxRev(&s.conRev, m.Sequence)
	}
	return c, err
}

// leaderGet reads key of KV bucket from the stream's leader, not with a
// direct get that a replica a few milliseconds behind may answer: a node
// that loads a contract after another node revoked it (and the revoking
// call returned) reads the revocation. Deleted or missing is
// store.ErrNotFound.
func (s *Store) leaderGet(ctx context.Context, bucket, key string) ([]byte, error) {
	m, err := leaderLast(ctx, s.nc, bucket, key)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	if m == nil {
		return nil, store.ErrNotFound
	}
	return m.Data, nil
}

// leaderLast reads the entry of key in KV bucket from the stream's
// leader; it is nil when the key is missing or deleted (a delete or purge
// marker, or the marker JetStream leaves when a key's TTL removes it).
func leaderLast(ctx context.Context, nc *nats.Conn, bucket, key string) (*nats.RawStreamMsg, error) {
	m, err := leaderLastOp(ctx, nc, bucket, key)
	if m != nil && isMarker(m) {
		return nil, nil
	}
	return m, err
}

// isMarker reports whether m, an entry of a KV bucket, marks its key
// deleted or purged (a delete or purge, or its TTL).
func isMarker(m *nats.RawStreamMsg) bool {
	return m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != ""
}

// leaderLastOp reads the last entry of the keys of KV bucket matching key
// (which may end in a wildcard) from the stream's leader, a delete or
// purge marker included; it is nil when there is none.
func leaderLastOp(ctx context.Context, nc *nats.Conn, bucket, key string) (*nats.RawStreamMsg, error) {
	js, err := nc.JetStream(nats.Context(ctx))
	if err != nil {
		return nil, err
	}
	m, err := js.GetLastMsg("KV_"+bucket, "$KV."+bucket+"."+key, nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return nil, nil
	}
	return m, err
}

func (s *Store) decodeContract(b []byte) (store.ContractRecord, error) {
	var c store.ContractRecord
	if err := json.Unmarshal(b, &c); err != nil {
		return c, &store.CorruptError{File: s.bucketName("contracts"), Reason: err.Error()}
	}
	return c, nil
}

// allContracts returns every contract kept.
func (s *Store) allContracts(ctx context.Context) ([]store.ContractRecord, error) {
	es, err := s.contractEntries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]store.ContractRecord, 0, len(es))
	for _, e := range es {
		out = append(out, e.rec)
	}
	return out, nil
}

// contractEntry is a contract as listed, with the key and revision of its
// entry in the contracts bucket.
type contractEntry struct {
	rec store.ContractRecord
	key string
	rev uint64
}

// contractEntries returns every contract kept, with its entry's revision.
func (s *Store) contractEntries(ctx context.Context) ([]contractEntry, error) {
	vals, err := s.entries(ctx, s.contracts)
	if err != nil {
		return nil, err
	}
	out := make([]contractEntry, 0, len(vals))
	for k, e := range vals {
		c, err := s.decodeContract(e.val)
		if err != nil {
			return nil, err
		}
		out = append(out, contractEntry{rec: c, key: k, rev: e.rev})
	}
	return out, nil
}

// DeleteExpiredContracts implements store.ContractLog.
func (s *Store) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	if err := s.recheck(ctx); err != nil {
		return 0, err
	}
	es, err := s.contractEntries(ctx)
	if err != nil {
		return 0, err
	}
	return s.purgeExpired(ctx, es, t)
}

// purgeExpired removes the contracts among es (as listed) that expired
// before t. Each is purged up to the revision listed (purgeUpTo), so a
// contract renewed since the listing, by any node, keeps its renewal and
// is not counted; no delete marker is left behind.
func (s *Store) purgeExpired(ctx context.Context, es []contractEntry, t time.Time) (int, error) {
	n := 0
	for _, e := range es {
		if e.rec.ExpiresAt.Before(t) {
			purged, err := s.purgeUpTo(ctx, s.bucketName("contracts"), e.key, e.rev)
			if err != nil {
				return n, err
			}
			n += min(int(purged), 1)
		}
	}
	return n, nil
}

// ListContracts implements store.ContractLister.
func (s *Store) ListContracts(ctx context.Context, expiringAfter time.Time) ([]store.ContractRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	all, err := s.allContracts(ctx)
	if err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(c store.ContractRecord) bool { return !c.ExpiresAt.After(expiringAfter) })
	slices.SortFunc(all, func(a, b store.ContractRecord) int { return cmp.Compare(a.ID, b.ID) })
	return all, nil
}
