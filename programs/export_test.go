package programs

import (
	"context"

	"github.com/tetratelabs/wazero/api"
)

// StartInstance starts (and closes) one more instance of the running
// version of program name, for the instance start benchmark.
func (mg *Manager) StartInstance(ctx context.Context, name string) error {
	p, err := mg.program(name, false)
	if err != nil {
		return err
	}
	p.mu.Lock()
	v := p.b.cur.Load()
	p.mu.Unlock()
	inst, err := v.instantiate(ctx)
	if err != nil {
		return err
	}
	return inst.mod.Close(ctx)
}

// StackBytes is stackBytes, for the test of what it reads.
func StackBytes(fn api.Function) int { return stackBytes(fn) }

// MaxElementBytes is maxElementBytes, for the test of the bound.
const MaxElementBytes = maxElementBytes
