package jsontext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// countedNames is an ASCIINameSink that counts what it hears.
type countedNames struct{ objects, names, plain int }

func (c *countedNames) Reset()            { c.objects++ }
func (c *countedNames) Add(string)        { c.names++ }
func (c *countedNames) AddASCII(n string) { c.names++; c.plain++ }

// TestDecodePaymentAllocations bounds what decoding bench/compare's
// payment costs: the copy of the text, one chunk of strings and one of
// numbers, the nine-member object's map (four allocations: a map above
// eight members is a table) and the nested object's (two).
func TestDecodePaymentAllocations(t *testing.T) {
	in := payment
	var names countedNames
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := DecodeDocument(in, dataDepth, &names); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 9.0)
	require.Equal(t, 9*201, names.plain, "every top-level name is plain ASCII")
}

// payment is bench/compare's payment authorization, 259 bytes: nine
// top-level members, one an object of two.
var payment = []byte(`{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP",` +
	`"paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web",` +
	`"description":"Order o-7f3a9c21: 2 items, standard delivery",` +
	`"metadata":{"cartId":"cart-5521","ab":"b12"}}`)
