package memory

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// madvPopulateWrite is Linux's MADV_POPULATE_WRITE (since 5.14): fault in
// the pages of a range, writable, as writing to each would, without
// changing what they hold.
const madvPopulateWrite = 23

// populateOff is set once the kernel refused MADV_POPULATE_WRITE (an
// older kernel, or a sandbox that filters it): touch writes to each page
// from then on.
var populateOff atomic.Bool

var osPageSize = uintptr(syscall.Getpagesize())

// populate faults in the pages that b spans, as touch does, in one call
// to the kernel rather than one fault per page: the kernel maps them in a
// batch, for about half the processor time. It reports whether it did;
// when it did not, nothing was done.
func populate(b []byte) bool {
	if len(b) == 0 || populateOff.Load() {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	// Whole pages of b only: the kernel's range starts on a page, and
	// the memory around b is another object's. The pages b begins and
	// ends within are written to.
	start := (p + osPageSize - 1) &^ (osPageSize - 1)
	end := (p + uintptr(len(b))) &^ (osPageSize - 1)
	if end <= start {
		return false
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, madvPopulateWrite)
	runtime.KeepAlive(b)
	if errno != 0 {
		populateOff.Store(true)
		return false
	}
	b[0] = 0
	b[len(b)-1] = 0
	return true
}
