package yamlnum_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"pigeon/internal/yamlnum"
)

type limits struct {
	Max     int            `yaml:"max"`
	Rate    float64        `yaml:"rate"`
	Wait    time.Duration  `yaml:"wait"`
	Sizes   []uint64       `yaml:"sizes"`
	ByName  map[string]int `yaml:"by_name"`
	Nested  *limits        `yaml:"nested"`
	Untaged int
}

func TestFraction(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		line      int // 0: none
	}{
		{"whole", "max: 3\n", 0},
		{"a whole float", "max: 2.0\nsizes: [1e3]\n", 0},
		{"a fraction", "rate: 0.5\nmax: 0.5\n", 2},
		{"in a list", "sizes: [1, 2.5]\n", 1},
		{"in a map", "by_name:\n  a: 1\n  b: 0.9\n", 3},
		{"nested", "nested:\n  nested:\n    max: 1.5\n", 3},
		{"through an alias", "base: &b 0.5\nmax: *b\n", 1},
		{"through a merge key", "x: &x {max: 0.5}\nnested:\n  <<: *x\n", 1},
		{"through a merge list", "x: &x {rate: 1}\ny: &y {max: 7.25}\nnested:\n  <<: [*x, *y]\n", 2},
		{"a float field", "rate: 0.25\n", 0},
		{"a duration", "wait: 1.5s\n", 0},
		{"an unknown key", "other: 0.5\n", 0},
		{"an untagged field", "untaged: 0.5\n", 1},
		{"text", "max: \"0.5\"\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			require.NoError(t, yaml.Unmarshal([]byte(tc.doc), &n))
			bad := yamlnum.Fraction(&n, reflect.TypeFor[limits]())
			if tc.line == 0 {
				require.Nil(t, bad)
				return
			}
			require.NotNil(t, bad)
			require.Equal(t, tc.line, bad.Line)
		})
	}
}
