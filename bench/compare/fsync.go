package main

import (
	"context"
	"os"
)

// rawFsync is the floor of any durable publish: write 300 bytes to a
// temp file and fsync it, one after the other; p50 of one write+fsync.
func rawFsync(ctx context.Context, c config) (result, error) {
	f, err := os.CreateTemp("", "compare-fsync-")
	if err != nil {
		return result{}, err
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	record := make([]byte, 300)
	copy(record, payload)
	return latencies(ctx, c, func(context.Context) error {
		if _, err := f.Write(record); err != nil {
			return err
		}
		return f.Sync()
	})
}
