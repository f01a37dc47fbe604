package storetest

import (
	"context"

	"pigeon/store"
)

// DamagedFile is where a Damaged store says it found damaged data: a path
// on a server's disk, which tests require clients are never told.
const DamagedFile = "/var/lib/pigeon/subjects/damaged/0000000001.log"

// Damaged is a store whose appends find damaged data in DamagedFile (a
// *store.CorruptError); everything else is the wrapped store's.
type Damaged struct {
	store.Store
}

// Append fails with a *store.CorruptError naming DamagedFile.
func (Damaged) Append(context.Context, store.Message) (store.Message, bool, error) {
	return store.Message{}, false, &store.CorruptError{File: DamagedFile, Offset: 4096, Reason: "bad checksum"}
}
