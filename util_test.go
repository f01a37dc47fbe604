package pigeon_test

import (
	"context"
	"strconv"
	"time"

	"pigeon"
	"pigeon/store"
)

func itoa(i int) string { return strconv.Itoa(i) }

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func verifyRecords(recs []pigeon.AuditRecord) error {
	return store.VerifyChain(store.Checkpoint{}, recs)
}
