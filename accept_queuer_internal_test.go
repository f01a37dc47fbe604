package pigeon

import "pigeon/store/memory"

// The default store queues each acceptance record with its message
// (audit_durable.go); the ability is found by its method alone, so a
// change of either signature would give it up without a word.
var _ acceptQueuer = (*memory.Store)(nil)
