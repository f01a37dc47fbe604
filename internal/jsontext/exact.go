package jsontext

// ExactNumber reports whether the number literal lit has at most 15
// significant digits and, unless it is zero, a decimal exponent within
// ±300: such decimals round to distinct doubles, in order, and a fraction
// never rounds to an integer, so comparing their doubles answers as
// comparing the decimals would. lit is a valid JSON number (NumberEnd).
func ExactNumber[T Text](lit T) bool {
	sig, exp10, first := 0, 0, -1 // significant digits, exponent of the first one
	pos, point := 0, -1           // digits seen; how many came before the point
	trailing := 0                 // zeros since the last non-zero digit
	i := 0
	if i < len(lit) && lit[i] == '-' {
		i++
	}
	for ; i < len(lit); i++ {
		c := lit[i]
		switch {
		case c == '.':
			point = pos
			continue
		case c == 'e' || c == 'E':
		case c == '0':
			pos++
			if first >= 0 {
				trailing++
			}
			continue
		default:
			if first < 0 {
				first = pos
			}
			pos++
			sig += trailing + 1
			trailing = 0
			continue
		}
		break
	}
	if first < 0 {
		return true // zero, whatever its exponent
	}
	if sig > 15 {
		return false
	}
	if point < 0 {
		point = pos
	}
	exp10 = point - first - 1
	if i < len(lit) { // the exponent
		i++
		neg := false
		if lit[i] == '+' || lit[i] == '-' {
			neg = lit[i] == '-'
			i++
		}
		if len(lit)-i > 4 {
			return false
		}
		e := 0
		for ; i < len(lit); i++ {
			e = e*10 + int(lit[i]-'0')
		}
		if neg {
			e = -e
		}
		exp10 += e
	}
	return exp10 >= -300 && exp10 <= 300
}
