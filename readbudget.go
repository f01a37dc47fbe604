package pigeon

import (
	"context"

	"pigeon/store"
)

// DefaultMaxReadBytes is Options.MaxReadBytes when it is 0.
const DefaultMaxReadBytes = 16 << 20

// MaxReadBytes is the Options.MaxReadBytes in force: about the most
// bytes of messages one replay or pull receive returns (see there). A
// server bounding the memory its reads hold at once reserves by it.
func (e *Engine) MaxReadBytes() int { return e.opts.MaxReadBytes }

// readChunk is how many messages a budgeted read asks the store for at
// once, so that what it holds beyond its budget is at most one chunk.
const readChunk = 64

// readBudget reads messages of subject from from on, as store.Read does,
// but in chunks and only until max messages, or until the next would take
// their stored bytes past budget (the first message is always taken).
func (e *Engine) readBudget(ctx context.Context, subject string, from uint64, max, budget int) (out []store.Message, err error) {
	size := 0
	for len(out) < max {
		sms, err := e.store.Read(ctx, subject, from, min(readChunk, max-len(out)))
		if err != nil {
			return out, err
		}
		if len(sms) == 0 {
			return out, nil
		}
		for _, sm := range sms {
			if len(out) > 0 && size+len(sm.Body) > budget {
				return out, nil
			}
			size += len(sm.Body)
			out = append(out, sm)
		}
		from = sms[len(sms)-1].Seq + 1
	}
	return out, nil
}
