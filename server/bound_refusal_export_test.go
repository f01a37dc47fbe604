package server

import (
	"context"

	"pigeon/internal/readpool"
)

// HoldReadBytes takes n bytes of s's read pool for reads of principal,
// as reads whose answers are never read would hold them, and returns
// what gives them back.
func HoldReadBytes(s *Server, principal string, n int64) (release func()) {
	who := readpool.Key{Principal: principal}
	held, err := s.reads.Reserve(context.Background(), who, 1)
	if err != nil {
		panic(err)
	}
	held = s.reads.Resize(who, held, n)
	return func() { s.reads.Resize(who, held, 0) }
}
