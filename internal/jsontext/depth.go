package jsontext

// Depth is how deeply b nests objects and arrays (0 for a scalar or
// nothing), read as JSON text whether or not it is valid: brackets inside
// strings do not count. It is how a sender finds data that a reader
// bounding the depth (Validate's maxDepth) would refuse, before sending.
func Depth(b []byte) int {
	depth, most, str := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case str:
			switch c {
			case '\\':
				i++ // the escaped character
			case '"':
				str = false
			}
		case c == '"':
			str = true
		case c == '[' || c == '{':
			depth++
			most = max(most, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return most
}
