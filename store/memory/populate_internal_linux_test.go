package memory

import (
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// threadFaults is how many page faults the calling thread has taken
// (RUSAGE_THREAD): the collector's and other goroutines' are not counted.
func threadFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru))
	return ru.Minflt + ru.Majflt
}

// touch leaves the pages of a slice faulted in, by the kernel at once
// (populate) or, where the kernel refuses that, by a write to each page,
// and what they hold unchanged (zero): writing to each page afterwards
// takes (almost) no fault. The slice starts and ends within a page.
func TestTouchFaultsThePagesIn(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, tc := range []struct {
		name     string
		populate bool
	}{
		{"populated", true},
		{"written to", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer populateOff.Store(populateOff.Load())
			populateOff.Store(!tc.populate)
			const size = 8 << 20
			// A fresh mapping, never written: every page faults on a
			// first write unless touch faulted it in.
			mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			require.NoError(t, err)
			defer func() { require.NoError(t, syscall.Munmap(mem)) }()
			b := mem[100 : size-100]
			require.False(t, populate(b[:1]), "no whole page: nothing done")
			touch(b, len(b))
			if tc.populate && populateOff.Load() {
				t.Skip("the kernel refuses MADV_POPULATE_WRITE")
			}
			for i := range mem {
				if mem[i] != 0 {
					t.Fatalf("byte %d is %d, not zero", i, mem[i])
				}
			}
			pages := int64(size / int(osPageSize))
			before := threadFaults(t)
			for i := 0; i < len(mem); i += int(osPageSize) {
				mem[i] = 1
			}
			require.Less(t, threadFaults(t)-before, pages/16, "writing to %d pages faulted", pages)
		})
	}
}
