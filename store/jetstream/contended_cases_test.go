package jetstream

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// contendedCase is a case of a bounded compare-and-set loop (casRetryN)
// against a twin process: races tries the twin wins, and whether ctx is
// cancelled while it is contended; want is the error the call ends with
// (nil: it wins at last).
type contendedCase struct {
	name   string
	races  int
	cancel bool
	want   error
}

// contendedCases are the cases every bounded loop is held to.
var contendedCases = []contendedCase{
	{name: "wins after losing three tries", races: 3},
	{name: "every try lost", races: 1 << 30, want: ErrContended},
	{name: "cancelled while contended", races: 1 << 30, cancel: true, want: context.Canceled},
}

// twins opens two Stores of node "a" on one fresh prefix of a fresh
// server, as two processes given the same node name.
func twins(t *testing.T) (a, a2 *Store) {
	t.Helper()
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	prefix := freshPrefix()
	a, err := Open(t.Context(), nc, &Options{Prefix: prefix, Node: "a", Memory: true})
	require.NoError(t, err)
	a2, err = Open(t.Context(), nc, &Options{Prefix: prefix, Node: "a", Memory: true})
	require.NoError(t, err)
	return a, a2
}
