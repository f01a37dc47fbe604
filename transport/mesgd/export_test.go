package mesgd

import "time"

// SetClock runs s on now, the engine's fake clock (pigeon.Options.Now),
// reading it again at least every poll while it waits to renew; armed
// learns each time a renewal loop waits until a new time.
func SetClock(s *Server, now func() time.Time, poll time.Duration, armed func(until time.Time)) {
	s.now, s.poll, s.armed = now, poll, armed
}

// EscapedPath is escapedPath, for its tests.
var EscapedPath = escapedPath

// SetWaiting makes s call waiting as each delivery starts to wait for
// its turn to write.
func SetWaiting(s *Server, waiting func()) { s.waiting = waiting }

// Tracked is how many connections s holds, those Reauthenticate checks.
func Tracked(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
