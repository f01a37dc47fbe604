// Package yamlnum finds numbers with a fraction that YAML would put in
// integer fields. JSON refuses such a number; yaml.v3 truncates it, so
// that "maxAgeMs: 0.5" or "max_connections_per_ip: 0.5" decodes as 0,
// which in those fields means no limit at all.
package yamlnum

import (
	"math"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxDepth bounds the walk, through aliases too (a cycle of them).
const maxDepth = 64

// Fraction returns the first scalar of n, decoded into a value of type t,
// that is a number with a fraction where the field is an integer (not a
// time.Duration, which YAML spells as text); nil when there is none. A
// whole number written as a float (1e3, 2.0) is that integer, as yaml.v3
// reads it. Struct fields are matched by their yaml tag's name (else their
// Go name in lower case, yaml.v3's default); aliases and merge keys
// (<<: *a, <<: [*a, *b]) are followed. Call it on a document that
// yaml.v3 decoded into t without error: its guard against alias bombs
// bounds what is followed here too.
func Fraction(n *yaml.Node, t reflect.Type) *yaml.Node {
	return fraction(n, t, 0)
}

func fraction(n *yaml.Node, t reflect.Type, depth int) *yaml.Node {
	if n == nil || depth > maxDepth {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if bad := fraction(c, t, depth+1); bad != nil {
				return bad
			}
		}
	case yaml.AliasNode:
		return fraction(n.Alias, t, depth+1)
	case yaml.ScalarNode:
		var f float64
		if isInteger(t) && n.ShortTag() == "!!float" && n.Decode(&f) == nil && f != math.Trunc(f) {
			return n
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, c := range n.Content {
				if bad := fraction(c, t.Elem(), depth+1); bad != nil {
					return bad
				}
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			var ft reflect.Type
			switch {
			case k.ShortTag() == "!!merge" && v.Kind == yaml.SequenceNode: // <<: [*a, *b]
				for _, m := range v.Content {
					if bad := fraction(m, t, depth+1); bad != nil {
						return bad
					}
				}
				continue
			case k.ShortTag() == "!!merge":
				ft = t
			case t.Kind() == reflect.Map:
				ft = t.Elem()
			case t.Kind() == reflect.Struct:
				ft = field(t, k.Value)
			}
			if ft == nil {
				continue
			}
			if bad := fraction(v, ft, depth+1); bad != nil {
				return bad
			}
		}
	}
	return nil
}

// isInteger reports whether t holds an integer that YAML spells as a
// number.
func isInteger(t reflect.Type) bool {
	return t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 && t != reflect.TypeFor[time.Duration]()
}

// field is the type of the field of struct t that the YAML key names; nil
// for none.
func field(t reflect.Type, key string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return f.Type
		}
	}
	return nil
}
