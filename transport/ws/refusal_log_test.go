package ws_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// refusalLog gathers what the client logs as not handed over: an entry
// of a list (a deliver_batch's delivery, a receive or replay answer's
// message) or a delivery it refuses alone.
type refusalLog struct {
	mu      sync.Mutex
	entries []loggedEntry
}

// loggedEntry is one logged refusal: the op, the entry's index, and the
// id and sequence of its message as far as they could be read ("", 0:
// nothing).
type loggedEntry struct {
	op        string
	index     int64
	messageID string
	sequence  uint64
}

// entryRefusal is a logged refusal without its sequence: the op, the
// entry's index and the id of its message ("" for an entry that is none).
type entryRefusal struct {
	op        string
	index     int64
	messageID string
}

func (l *refusalLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *refusalLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "not handed over") {
		return nil
	}
	var e loggedEntry
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "op":
			e.op = a.Value.String()
		case "index":
			e.index = a.Value.Int64()
		case "messageId":
			e.messageID = a.Value.String()
		case "sequence":
			e.sequence = a.Value.Uint64()
		}
		return true
	})
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
	return nil
}
func (l *refusalLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *refusalLog) WithGroup(string) slog.Handler      { return l }

// got is every refusal logged so far, in order.
func (l *refusalLog) got() []loggedEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loggedEntry(nil), l.entries...)
}

// withoutSequences is every refusal logged so far, in order, without
// the sequences of their messages.
func (l *refusalLog) withoutSequences() []entryRefusal {
	var out []entryRefusal
	for _, e := range l.got() {
		out = append(out, entryRefusal{e.op, e.index, e.messageID})
	}
	return out
}

// ids are the message ids of every refusal logged so far, in order.
func (l *refusalLog) ids() []string {
	var out []string
	for _, e := range l.got() {
		out = append(out, e.messageID)
	}
	return out
}

// keep forgets the refusals logged after the first n.
func (l *refusalLog) keep(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = l.entries[:n]
}
