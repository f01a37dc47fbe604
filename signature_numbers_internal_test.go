package pigeon

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExactNumberMatchesExactArithmetic checks exactNumber, fast path
// included, against exact rational arithmetic: a literal is exact when its
// value equals the shortest decimal of its nearest double.
func TestExactNumberMatchesExactArithmetic(t *testing.T) {
	ref := func(lit string) bool {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return false
		}
		want, ok := new(big.Rat).SetString(lit)
		require.True(t, ok, lit)
		got, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'e', -1, 64))
		require.True(t, ok, lit)
		return want.Cmp(got) == 0
	}
	rng := rand.New(rand.NewPCG(7, 8))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		return b.String()
	}
	lits := []string{"0", "-0", "0.0", "0e5", "1e-400", "-1e-400", "5e-324", "2.5e-324", "1.7976931348623157e308",
		"9007199254740992", "9007199254740993", "123456789012345", "1234567890123456", "0.1", "0.10000000000000001",
		"100000000000000000000", "1E21", "1e-7", "4.9406564584124654e-324", "2.2250738585072014e-308", "1e-307", "9.99999999999999e307"}
	for range 20000 {
		lit := ""
		if rng.IntN(2) == 0 {
			lit = "-"
		}
		if rng.IntN(4) == 0 {
			lit += "0"
		} else {
			lit += strconv.Itoa(1+rng.IntN(9)) + digits(rng.IntN(20))
		}
		if rng.IntN(2) == 0 {
			lit += "." + digits(1+rng.IntN(20))
		}
		if rng.IntN(2) == 0 {
			lit += "e" + strconv.Itoa(rng.IntN(680)-340)
		}
		lits = append(lits, lit)
	}
	for _, lit := range lits {
		require.Equal(t, ref(lit), exactNumber([]byte(lit)), lit)
	}
}
