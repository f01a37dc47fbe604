package wal

import (
	"os"
	"syscall"
)

// preallocate allocates f's blocks up to size and makes size its size when
// it was smaller (fallocate, mode 0); what it adds reads as zero bytes.
func preallocate(f *os.File, size int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
		if err != syscall.EINTR {
			return err
		}
	}
}
