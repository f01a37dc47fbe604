package schema

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"
)

// propsSchemas check an object's properties in one lookup each (byName)
// or by walking its members: required names that are properties and names
// that are not (loose), more properties than
// members and fewer, nested.
var propsSchemas = []string{
	`{"type":"object","required":["a","z"],"properties":{"a":{"type":"string"},"b":{"type":"number"}}}`,
	`{"type":"object","required":["a","b"],"properties":{"a":{"type":"string"},"b":{"type":"number"},"c":{"type":"boolean"},"d":{"type":"null"},"e":{"type":"array"}}}`,
	`{"type":"object","required":["z","y"],"properties":{"a":{"type":"string"}}}`,
	`{"type":"object","properties":{"a":{"type":"string"},"o":{"type":"object","required":["p","q"],"properties":{"p":{"type":"integer"}}}}}`,
	`{"required":["a"],"properties":{}}`,
}

func TestFastPropertiesAgreeWithGojsonschema(t *testing.T) {
	docs := []string{
		`{}`, `{"a":"x"}`, `{"a":"x","z":1}`, `{"a":1,"z":1}`, `{"z":1}`, `{"a":"x","z":null,"b":"n"}`,
		`{"a":"x","b":1,"c":true,"d":null,"e":[]}`, `{"a":"x","b":1}`, `{"b":1}`, `{"a":"x","b":1,"c":1}`,
		`{"a":"x","b":1,"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8}`,
		`{"a":"x","b":"1","m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8}`,
		`{"y":1,"z":2}`, `{"y":1,"z":2,"a":3}`, `{"y":1,"z":2,"a":"s","k":0}`, `{"z":2,"k":0,"j":1}`,
		`{"o":{"p":1,"q":2}}`, `{"o":{"p":1.5,"q":2}}`, `{"o":{"p":1}}`, `{"o":{"q":1,"r":2,"s":3}}`, `{"o":{"p":"x","q":1,"r":2,"s":3}}`,
		`[]`, `"a"`, `null`,
	}
	for i, src := range propsSchemas {
		s, err := Compile([]byte(src))
		require.NoError(t, err, src)
		require.NotNil(t, s.fast, "in the direct validator's subset: %s", src)
		for _, doc := range docs {
			data, ok := fastInput(doc)
			require.True(t, ok, doc)
			res, err := s.full.Validate(gojsonschema.NewBytesLoader([]byte(doc)))
			require.NoError(t, err, doc)
			require.Equal(t, res.Valid(), s.fast.valid(data), "schema %d on %s (%v)", i, doc, res.Errors())
		}
	}
}
