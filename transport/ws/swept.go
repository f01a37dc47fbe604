package ws

import "strings"

// maxSwept bounds the deliveries one subscription remembers after they
// left pending unanswered (sweptSet): past it, the oldest is forgotten.
const maxSwept = 1024

// sweptKey is one delivery: its message's id and sequence.
type sweptKey struct {
	id  string
	seq uint64
}

// sweptSet remembers the last maxSwept deliveries of a subscription that
// left pending without the client's answer (their ack wait passed, or a
// delivery of the same id took their place). Their answer may still come,
// late; one that names no sequence (a v1 client's) cannot be told from an
// answer to a newer delivery of the same id at another sequence, so such
// a delivery is marked reused (see serverSub.wait) and takes answers
// naming its sequence only. Each delivery is kept once, in the order it
// was first swept. The zero value is empty; its owner's lock guards it.
type sweptSet struct {
	ring []sweptKey        // up to maxSwept, oldest at next once full
	next int               // where the next one goes once ring is full
	has  map[sweptKey]bool // what ring holds
	ids  map[string]int    // how many of ring's deliveries each id has
}

// add remembers the delivery of id at seq, forgetting the oldest one
// when the set is full. It keeps a copy of id: the id of a delivery may
// share the memory of a larger frame, which is not to outlive it here.
func (s *sweptSet) add(id string, seq uint64) {
	if s.has[sweptKey{id, seq}] {
		return
	}
	k := sweptKey{strings.Clone(id), seq}
	if s.has == nil {
		s.has, s.ids = map[sweptKey]bool{}, map[string]int{}
	}
	if len(s.ring) < maxSwept {
		s.ring = append(s.ring, k)
	} else {
		old := s.ring[s.next]
		delete(s.has, old)
		if s.ids[old.id]--; s.ids[old.id] <= 0 {
			delete(s.ids, old.id)
		}
		s.ring[s.next] = k
		s.next = (s.next + 1) % maxSwept
	}
	s.has[k] = true
	s.ids[id]++
}

// other reports whether it remembers a delivery of id at a sequence
// other than seq.
func (s *sweptSet) other(id string, seq uint64) bool {
	if len(s.ring) == 0 {
		return false // the common case, checked on every delivery
	}
	n := s.ids[id]
	if s.has[sweptKey{id, seq}] {
		n--
	}
	return n > 0
}

// len is how many deliveries it remembers.
func (s *sweptSet) len() int { return len(s.ring) }
