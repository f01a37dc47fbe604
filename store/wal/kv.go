package wal

import (
	"bytes"
	"context"

	"pigeon/store"
)

// Put implements store.KV.
func (s *Store) Put(ctx context.Context, bucket, key string, val []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	_, err := s.metaWrite(encodeKVPut(bucket, key, val))
	return err
}

// Swap implements store.KVSwapper. Its record (kind 32) carries the old
// value and the new one, and is applied only if the key holds the old
// value when it is applied: as it commits, under the lock every meta
// record is applied under, and in the same order on replay, so that a
// swap the store answered ErrChanged is not made by a reopen either. A
// swap that cannot be made now writes nothing.
func (s *Store) Swap(ctx context.Context, bucket, key string, old, val []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	cur, ok := s.meta.kv[bucket][key]
	holds := ok == (old != nil) && bytes.Equal(cur, old)
	s.meta.mu.RUnlock()
	if !holds {
		return store.ErrChanged
	}
	made, err := s.metaWrite(encodeKVSwap(bucket, key, old, val))
	if err != nil {
		return err
	}
	if made == 0 {
		return store.ErrChanged
	}
	return nil
}

var _ store.KVSwapper = (*Store)(nil)

// encodeKVSwap is the record of a swap of bucket/key from old to val (nil:
// no value), with whether each is present.
func encodeKVSwap(bucket, key string, old, val []byte) []byte {
	e := newEnc(kindKVSwap, len(bucket)+len(key)+len(old)+len(val)+12)
	e.str(bucket)
	e.str(key)
	e.bool(old != nil)
	e.bytes(old)
	e.bool(val != nil)
	e.bytes(val)
	return e.finish()
}

// Get implements store.KV; a missing key is store.ErrNotFound.
func (s *Store) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	v, ok := s.meta.kv[bucket][key]
	s.meta.mu.RUnlock()
	if !ok {
		return nil, store.ErrNotFound
	}
	return cloneBytes(v), nil
}

// Delete implements store.KV; deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	_, ok := s.meta.kv[bucket][key]
	s.meta.mu.RUnlock()
	if !ok {
		return nil
	}
	e := newEnc(kindKVDelete, len(bucket)+len(key)+8)
	e.str(bucket)
	e.str(key)
	_, err := s.metaWrite(e.finish())
	return err
}

// List implements store.KV: a copy of the bucket, empty when unknown.
func (s *Store) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	out := make(map[string][]byte, len(s.meta.kv[bucket]))
	for k, v := range s.meta.kv[bucket] {
		out[k] = cloneBytes(v)
	}
	return out, nil
}
