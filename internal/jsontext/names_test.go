package jsontext

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type sig struct {
	KID string `json:"kid"`
	Alg string `json:"alg"`
}

type inner struct {
	Depth int  `json:"depth"`
	ID    *sig `json:"id"` // hidden by envelope's own "id"
}

type envelope struct {
	inner
	ID     string          `json:"id"`
	Data   json.RawMessage `json:"data"`
	Any    any             `json:"any"`
	Sig    *sig            `json:"signature"`
	Sigs   []sig           `json:"sigs"`
	ByName map[string]sig  `json:"byName"`
	At     time.Time       `json:"at"`
	Secret string          `json:"-"`
	Plain  string          // no tag: its Go name
	Fixed  [2]*sig         `json:"fixed"`
	//lint:ignore U1000 unexported, so encoding/json skips it: the test checks CaseVariant does too
	hidden  string
	Opts    *struct{ N int } `json:"opts,omitempty"`
	Rawlist []json.RawMessage
}

func TestCaseVariant(t *testing.T) {
	typ := reflect.TypeFor[envelope]()
	for _, tc := range []struct {
		name, in, path, field string
	}{
		{"exact", `{"id":"1","data":{"x":1},"signature":{"kid":"k","alg":"a"},"Plain":"p","depth":1}`, "", ""},
		{"unknown members", `{"other":1,"iD2":2}`, "", ""},
		{"top level", `{"id":"1","Data":{}}`, "/Data", "data"},
		{"upper", `{"ID":"1"}`, "/ID", "id"},
		{"Kelvin sign folds to k", "{\"signature\":{\"\u212aid\":\"k\"}}", "/signature/\u212aid", "kid"},
		{"nested pointer", `{"signature":{"kid":"k","ALG":"a"}}`, "/signature/ALG", "alg"},
		{"slice element", `{"sigs":[{"kid":"a"},{"Kid":"b"}]}`, "/sigs/1/Kid", "kid"},
		{"array of pointers", `{"fixed":[null,{"aLg":"b"}]}`, "/fixed/1/aLg", "alg"},
		{"map value", `{"byName":{"a/b":{"KID":"x"}}}`, "/byName/a~1b/KID", "kid"},
		{"map keys are data", `{"byName":{"KID":{"kid":"x"}}}`, "", ""},
		{"embedded field", `{"Depth":2}`, "/Depth", "depth"},
		{"untagged field by Go name", `{"plain":"p"}`, "/plain", "Plain"},
		{"raw data not looked into", `{"data":{"Data":1,"ID":2}}`, "", ""},
		{"interface not looked into", `{"any":{"ID":1}}`, "", ""},
		{"self-decoding type not looked into", `{"at":"2026-01-01T00:00:00Z"}`, "", ""},
		{"dash field is no field", `{"secret":"s","Secret":"s"}`, "", ""},
		{"unexported field is no field", `{"hidden":"h"}`, "", ""},
		{"anonymous struct", `{"opts":{"n":1}}`, "/opts/n", "N"},
		{"first in document order", `{"Sigs":[],"ID":"1"}`, "/Sigs", "sigs"},
		{"not an object", `[{"ID":1}]`, "", ""},
		{"wrong types are left to the decoder", `{"signature":"s","sigs":{"Kid":1}}`, "", ""},
		{"a shallower field hides an embedded one", `{"id":{"KID":"x"}}`, "", ""},
		{"escaped name", `{"I\u0044":"1"}`, "/ID", "id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, Validate([]byte(tc.in), 64))
			path, field, ok := CaseVariant([]byte(tc.in), typ)
			require.Equal(t, tc.path != "", ok)
			require.Equal(t, tc.path, path)
			require.Equal(t, tc.field, field)
		})
	}
}

// FuzzCaseVariant holds CaseVariant to encoding/json itself: a member
// named name fills the field "kid" exactly when name is "kid" or a
// variant CaseVariant reports.
func FuzzCaseVariant(f *testing.F) {
	for _, s := range []string{"kid", "KID", "Kid", "\u212aid", "kıd", "kİd", "k\u0131d", "ki", "kidd", "", "alg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		in := []byte(`{` + strconv.Quote(name) + `:"v"}`)
		if Validate(in, 8) != nil {
			return
		}
		var s sig
		require.NoError(t, json.Unmarshal(in, &s))
		path, field, ok := CaseVariant(in, reflect.TypeFor[sig]())
		filled := s.KID == "v" || s.Alg == "v"
		switch {
		case name == "kid" || name == "alg":
			require.False(t, ok)
		case filled:
			require.True(t, ok, "%q fills a field", name)
			require.Equal(t, "/"+pointerToken(name), path)
			require.Contains(t, []string{"kid", "alg"}, field)
		default:
			require.False(t, ok, "%q fills no field", name)
		}
	})
}
