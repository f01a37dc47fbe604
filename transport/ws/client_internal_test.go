package ws

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var dataCases = []string{
	`{"a":1}`, `{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, `[1,2`, `{"a":}`, `1 2`, ` {"a":[true,null]} `, ``, `01`,
	strings.Repeat("[", 200) + strings.Repeat("]", 200), `{"a":1,"a":` + strings.Repeat("[", 100),
}

// TestValidData: the client's check of a message's data answers as
// json.Valid does on every kind of text: valid, ambiguous (left to the
// server's codes), broken and deep.
func TestValidData(t *testing.T) {
	for _, c := range dataCases {
		require.Equal(t, json.Valid([]byte(c)), validData([]byte(c)), "%q", c)
	}
}

func FuzzValidData(f *testing.F) {
	for _, c := range dataCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		require.Equal(t, json.Valid(b), validData(b), "%q", b)
	})
}
