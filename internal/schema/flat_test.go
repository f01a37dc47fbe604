package schema

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

// flatDepth is the nesting the broker decodes data to (pigeon.MaxJSONDepth).
const flatDepth = 64

// checkFlat holds s to the same answer, verdict and reason alike, on
// doc decoded in the flat form (jsontext.DecodeFlat) as on doc decoded
// as a tree (jsontext.DecodeDocument), through Validate and, when the
// decoder found every number exact, ValidateExact, as the schema gate
// calls them.
func checkFlat(t *testing.T, s *Schema, doc string) {
	t.Helper()
	tree, err := jsontext.DecodeDocument([]byte(doc), flatDepth, nil)
	if err != nil {
		return
	}
	flat, err := jsontext.DecodeFlat([]byte(doc), flatDepth, nil, nil)
	require.NoError(t, err, doc)
	raw := flat.Text
	require.Equal(t, s.Validate(tree.Value, raw), s.Validate(flat.Value, raw), "Validate on %s", doc)
	if tree.Exact {
		require.Equal(t, s.ValidateExact(tree.Value, raw), s.ValidateExact(flat.Value, raw), "ValidateExact on %s", doc)
	}
	if s.fast != nil && tree.Exact {
		require.Equal(t, s.fast.valid(tree.Value), s.fast.valid(flat.Value), "the direct validator on %s", doc)
	}
}

// flatSeeds add, to reasonSeeds, objects of more than 16 members (a map
// in the flat form) holding small ones (Objects).
var flatSeeds = []string{
	`{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web","description":"Order o-7f3a9c21: 2 items, standard delivery","metadata":{"cartId":"cart-5521","ab":"b12"}}`,
	`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t","card":{"pan":"4111"},"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8,"m9":9,"ma":10,"mb":11}`,
	`{"s":[{"a":1,"b":[2]},{"b":[2],"a":1}],"meta":{"k":{"a":"s","b":1},"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8,"m9":9,"ma":10,"mb":11,"mc":12,"md":13,"me":14,"mf":15,"mg":{"x":[{"y":1}]}}}`,
	`{"meta":{"a":{"b":{"c":{}}}},"a":[[{"x":1}],{"y":[{}]}]}`,
}

func FuzzFlatMatchesTree(f *testing.F) {
	for _, seed := range append(slices.Clone(reasonSeeds), flatSeeds...) {
		f.Add(seed)
	}
	schemas := compileAll(f, append(slices.Clone(testSchemas), reasonSchemas...))
	f.Fuzz(func(t *testing.T, doc string) {
		for _, s := range schemas {
			checkFlat(t, s, doc)
		}
	})
}
