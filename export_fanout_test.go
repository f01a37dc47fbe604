package pigeon

// FanoutState reports whether e's fan-out of subject has started (it
// knows where the subject ends) and how many subscribers it routes to
// live; false and 0 when e runs none for subject.
func FanoutState(e *Engine, subject string) (started bool, live int) {
	f := e.fanoutOf(subject)
	if f == nil {
		return false, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inited, f.live.Len()
}
