package wal

import (
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
