package seal_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestUnsupportedAlgIsNotEchoedWhole: the error of a sealed object of an
// unknown alg quotes at most the alg's first bytes, escaped: a sender's
// megabyte of text, terminal escapes included, does not reach the logs of
// the programs that report it.
func TestUnsupportedAlgIsNotEchoedWhole(t *testing.T) {
	for _, alg := range []string{strings.Repeat("A", 1<<20), "\x1b[2J" + strings.Repeat("\n", 1000), strings.Repeat("é", 100)} {
		err := (&seal.Sealed{V: seal.Version, Alg: alg}).Validate()
		require.ErrorIs(t, err, seal.ErrUnsupported)
		require.Less(t, len(err.Error()), 200, err.Error())
		require.NotContains(t, err.Error(), "\x1b")
		require.NotContains(t, err.Error(), "\n")
	}
}
