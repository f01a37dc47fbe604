package memory

import (
	"bytes"
	"context"

	"pigeon/store"
)

// Put stores a copy of val under bucket and key.
func (s *Store) Put(ctx context.Context, bucket, key string, val []byte) error {
	return s.store(ctx, bucket, key, val, false)
}

// Create stores a copy of val under bucket and key if the key has no
// value, and returns store.ErrExists otherwise (store.KVCreator).
func (s *Store) Create(ctx context.Context, bucket, key string, val []byte) error {
	return s.store(ctx, bucket, key, val, true)
}

// store is Put, or Create when create is set.
func (s *Store) store(ctx context.Context, bucket, key string, val []byte, create bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	val = bytes.Clone(val)
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	b := s.kv[bucket]
	if b == nil {
		b = make(map[string][]byte)
		s.kv[bucket] = b
	}
	if _, ok := b[key]; ok && create {
		return store.ErrExists
	}
	b[key] = val
	return nil
}

// Swap stores a copy of val under bucket and key (nil: deletes the key)
// if the key's value is old (nil: the key has none), and returns
// store.ErrChanged, storing nothing, otherwise (store.KVSwapper). The
// comparison and the write hold the store's lock.
func (s *Store) Swap(ctx context.Context, bucket, key string, old, val []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	val = bytes.Clone(val) // nil stays nil: a delete
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	cur, ok := s.kv[bucket][key]
	if ok != (old != nil) || !bytes.Equal(cur, old) {
		return store.ErrChanged
	}
	if val == nil {
		delete(s.kv[bucket], key)
		if len(s.kv[bucket]) == 0 {
			delete(s.kv, bucket)
		}
		return nil
	}
	b := s.kv[bucket]
	if b == nil {
		b = make(map[string][]byte)
		s.kv[bucket] = b
	}
	b[key] = val
	return nil
}

var (
	_ store.KVCreator = (*Store)(nil)
	_ store.KVSwapper = (*Store)(nil)
)

// Get returns a copy of the value under bucket and key, or
// store.ErrNotFound.
func (s *Store) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.kvMu.RLock()
	defer s.kvMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	val, ok := s.kv[bucket][key]
	if !ok {
		return nil, store.ErrNotFound
	}
	return bytes.Clone(val), nil
}

// Delete removes the value under bucket and key; removing a missing one is
// a no-op.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	b := s.kv[bucket]
	delete(b, key)
	if len(b) == 0 {
		delete(s.kv, bucket)
	}
	return nil
}

// List returns copies of every key and value in bucket; a bucket never
// written, or emptied, gives an empty map.
func (s *Store) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.kvMu.RLock()
	defer s.kvMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	b := s.kv[bucket]
	out := make(map[string][]byte, len(b))
	for k, v := range b {
		out[k] = bytes.Clone(v)
	}
	return out, nil
}
