package jetstream

import (
	"cmp"
	"sync"
)

// inParallel runs fn on each of items, n at a time, and starts no other
// once one has failed. It returns the items not run to success (those
// that failed and those never started, in no particular order) and the
// first failure.
func inParallel[T any](items []T, n int, fn func(T) error) (left []T, first error) {
	if len(items) == 0 {
		return nil, nil
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	work := make(chan T)
	for range min(n, len(items)) {
		wg.Go(func() {
			for it := range work {
				var err error
				if !failed() {
					if err = fn(it); err == nil {
						continue
					}
				}
				mu.Lock()
				left = append(left, it)
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	i := 0
	for ; i < len(items) && !failed(); i++ {
		work <- items[i]
	}
	close(work)
	wg.Wait()
	return append(left, items[i:]...), first
}
