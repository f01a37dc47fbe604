package storetest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/storetest"
)

// TestReopen runs the suite, reopen tests included, against a memory store
// that outlives its handles, so the reopen tests are known to pass for a
// correct store.
func TestReopen(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return newHandle(memory.New(nil))
	}, storetest.Features{
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return newHandle(s.(*handle).data)
		},
	})
}

// handle is one open of a memory store: Close ends the handle and keeps the
// data for the next one.
type handle struct {
	data *memory.Store
	cur  atomic.Pointer[memory.Store] // data, or a closed store after Close
}

var (
	_ store.Store          = (*handle)(nil)
	_ store.Trimmer        = (*handle)(nil)
	_ store.SeqTrimmer     = (*handle)(nil)
	_ store.ByteTrimmer    = (*handle)(nil)
	_ store.ContractLister = (*handle)(nil)
	_ store.KVSwapper      = (*handle)(nil)
	_ store.GroupPruner    = (*handle)(nil)
	_ store.FloorRaiser    = (*handle)(nil)

	_ store.GroupLister        = (*handle)(nil)
	_ store.GroupSubjectLister = (*handle)(nil)

	_ store.MessageSubjectLister = (*handle)(nil)
)

func newHandle(data *memory.Store) *handle {
	h := &handle{data: data}
	h.cur.Store(data)
	return h
}

func (h *handle) s() *memory.Store { return h.cur.Load() }

func (h *handle) Close(ctx context.Context) error {
	closed := memory.New(nil)
	_ = closed.Close(ctx)
	h.cur.Store(closed)
	return nil
}

func (h *handle) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	return h.s().Append(ctx, m)
}

func (h *handle) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	return h.s().Read(ctx, subject, from, max)
}

func (h *handle) Lookup(ctx context.Context, id string) (store.Message, error) {
	return h.s().Lookup(ctx, id)
}

func (h *handle) Bounds(ctx context.Context, subject string) (uint64, uint64, error) {
	return h.s().Bounds(ctx, subject)
}

func (h *handle) TrimBefore(ctx context.Context, subject string, t time.Time) (int, error) {
	return h.s().TrimBefore(ctx, subject, t)
}

func (h *handle) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	return h.s().TrimThrough(ctx, subject, seq)
}

func (h *handle) Bytes(ctx context.Context, subject string) (uint64, error) {
	return h.s().Bytes(ctx, subject)
}

func (h *handle) TrimToBytes(ctx context.Context, subject string, max uint64) (int, error) {
	return h.s().TrimToBytes(ctx, subject, max)
}

func (h *handle) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	return h.s().MarkDone(ctx, key, seq)
}

func (h *handle) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	return h.s().MarkAttempt(ctx, key, seq, n)
}

func (h *handle) PruneGroups(ctx context.Context, subject string, t time.Time, keep func(string) bool) (int, error) {
	return h.s().PruneGroups(ctx, subject, t, keep)
}

func (h *handle) ListGroups(ctx context.Context, subject string, max int) (map[string]store.GroupState, error) {
	return h.s().ListGroups(ctx, subject, max)
}

func (h *handle) ListGroupSubjects(ctx context.Context) ([]string, error) {
	return h.s().ListGroupSubjects(ctx)
}

func (h *handle) ListMessageSubjects(ctx context.Context) ([]string, error) {
	return h.s().ListMessageSubjects(ctx)
}

func (h *handle) RaiseFloor(ctx context.Context, key store.GroupKey, floor uint64) error {
	return h.s().RaiseFloor(ctx, key, floor)
}

func (h *handle) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	return h.s().LoadGroup(ctx, key)
}

func (h *handle) PutQuarantine(ctx context.Context, r store.QuarantineRecord) error {
	return h.s().PutQuarantine(ctx, r)
}

func (h *handle) GetQuarantine(ctx context.Context, id string) (store.QuarantineRecord, error) {
	return h.s().GetQuarantine(ctx, id)
}

func (h *handle) ListQuarantine(ctx context.Context, since time.Time, max int) ([]store.QuarantineRecord, error) {
	return h.s().ListQuarantine(ctx, since, max)
}

func (h *handle) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	return h.s().AppendAudit(ctx, recs...)
}

func (h *handle) ReadAudit(ctx context.Context, from uint64, max int) ([]store.AuditRecord, error) {
	return h.s().ReadAudit(ctx, from, max)
}

func (h *handle) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	return h.s().AuditHead(ctx)
}

func (h *handle) PutContract(ctx context.Context, c store.ContractRecord) error {
	return h.s().PutContract(ctx, c)
}

func (h *handle) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	return h.s().GetContract(ctx, id)
}

func (h *handle) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	return h.s().DeleteExpiredContracts(ctx, t)
}

func (h *handle) ListContracts(ctx context.Context, t time.Time) ([]store.ContractRecord, error) {
	return h.s().ListContracts(ctx, t)
}

func (h *handle) Put(ctx context.Context, bucket, key string, val []byte) error {
	return h.s().Put(ctx, bucket, key, val)
}

func (h *handle) Swap(ctx context.Context, bucket, key string, old, val []byte) error {
	return h.s().Swap(ctx, bucket, key, old, val)
}

func (h *handle) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	return h.s().Get(ctx, bucket, key)
}

func (h *handle) Delete(ctx context.Context, bucket, key string) error {
	return h.s().Delete(ctx, bucket, key)
}

func (h *handle) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	return h.s().List(ctx, bucket)
}
