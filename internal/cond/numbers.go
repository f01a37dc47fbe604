package cond

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/google/cel-go/common/types"

	"pigeon/internal/jsontext"
)

// ExactData decodes raw, a JSON document, for conditions that must judge
// its numbers as written. A condition reads message.data's numbers as
// doubles, while the store keeps, and exact readers get, the publisher's
// text: to a double, 100.0000000000000001 is 100 and 9007199254740993 is
// 9007199254740992. In the value ExactData returns, each number a double
// does not hold faithfully is an error value instead: an expression that
// reads it fails, and the broker fails closed on a failed condition (a
// deny rule denies, an allow rule does not allow, a data-quality rule
// refuses, a subscription filter does not deliver). Numbers with at most
// 15 significant digits and a decimal exponent within ±300
// (jsontext.ExactNumber), and integers of magnitude below 2^53, are held faithfully
// and decode as float64, as for any condition.
//
// Callers use it only for data a decoder found not exact
// (jsontext.Document.Exact); it decodes with encoding/json, which is
// slower.
func ExactData(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return faithful(v), nil
}

// errInexact is what a condition reads in place of a number a double
// does not hold faithfully.
var errInexact = types.NewErr("message.data holds a number a condition cannot compare exactly")

// faithful replaces, in place, v's numbers (json.Number) by their
// float64, or by errInexact where the double is not the number.
func faithful(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = faithful(e)
		}
	case []any:
		for i, e := range x {
			x[i] = faithful(e)
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || !jsontext.ExactNumber(string(x)) && !(integer(string(x)) && -1<<53 < f && f < 1<<53) {
			return errInexact
		}
		return f
	}
	return v
}

// integer reports whether the number literal lit has no fraction and no
// exponent.
func integer(lit string) bool {
	for i := 0; i < len(lit); i++ {
		if c := lit[i]; (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return false
		}
	}
	return true
}
