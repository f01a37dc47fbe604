package schema

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidatorPanicIsARefusal: gojsonschema dereferences the exact value
// of a number math/big cannot read (an exponent such as that of
// 0e10000000000000000000) and panicked, on a schema document or on data
// it validates (a schema the direct validator does not cover: a $ref
// with a minimum). Compile refuses such a schema with ErrValidatorFailed,
// and Validate refuses such data, without a panic.
func TestValidatorPanicIsARefusal(t *testing.T) {
	for _, raw := range []string{`0e10000000000000000000`, `1e-10000000000000000000`} {
		require.NotPanics(t, func() {
			_, err := Compile([]byte(raw))
			require.ErrorIs(t, err, ErrValidatorFailed, raw)
		}, raw)
	}
	_, err := Compile([]byte(`{"minimum":0e10000000000000000000}`))
	require.Error(t, err, "gojsonschema refuses this one itself")
	s, err := Compile([]byte(`{"type":"object","properties":{"a":{"$ref":"#/definitions/n"}},"definitions":{"n":{"type":"number","minimum":0}}}`))
	require.NoError(t, err)
	require.Nil(t, s.fast, "gojsonschema judges it")
	for _, data := range []string{`{"a":0e10000000000000000000}`, `{"a":1e-10000000000000000000}`} {
		var v any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		require.NotPanics(t, func() {
			require.Equal(t, "data could not be validated", s.Validate(v, []byte(data)), data)
		}, data)
	}
	var v any
	require.NoError(t, json.Unmarshal([]byte(`{"a":1}`), &v))
	require.Empty(t, s.Validate(v, []byte(`{"a":1}`)), "a readable number is judged as before")
}
