package server

import "time"

// SetReadWait sets how long a read waits for room in the read pool, and
// returns what restores it.
func SetReadWait(d time.Duration) (restore func()) {
	old := readWait
	readWait = d
	return func() { readWait = old }
}

// ReadBytesInFlight is what the server's reads hold now.
func (s *Server) ReadBytesInFlight() int64 { return s.reads.InUse() }

// ReadsRefused counts the server's reads refused for want of room.
func (s *Server) ReadsRefused() uint64 { return s.reads.Refused() }

// SetProgramChangeHook sets what runs after a program request's own checks
// and before the manager changes the program, and returns what restores it.
func SetProgramChangeHook(f func(name string)) (restore func()) {
	old := programChangeHook
	programChangeHook = f
	return func() { programChangeHook = old }
}

// HoldLogWalks takes every slot for walks of the audit log, as that many
// receipts requests would, and returns what gives them back.
func HoldLogWalks(s *Server) (release func()) {
	for range maxLogWalks {
		s.logWalks <- struct{}{}
	}
	return func() {
		for range maxLogWalks {
			<-s.logWalks
		}
	}
}

// LogWalksInUse is how many walks of the audit log requests hold now.
func LogWalksInUse(s *Server) int { return len(s.logWalks) }

// HoldLogWalkOf takes a walk of the audit log for principal, as a
// receipts request of it would, and returns what gives it back.
func HoldLogWalkOf(s *Server, principal string) (release func()) {
	release, err := s.walkLog(principal)
	if err != nil {
		panic(err)
	}
	return release
}

// MaxPageBytes is the byte budget of a page of GET /v1/accounts,
// /v1/roles and /v1/programs.
func MaxPageBytes() int { return maxPageBytes }

// SetMaxPageBytes sets the byte budget of a page of GET /v1/accounts,
// /v1/roles and /v1/programs, and returns what restores it.
func SetMaxPageBytes(n int) (restore func()) {
	old := maxPageBytes
	maxPageBytes = n
	return func() { maxPageBytes = old }
}
