package jsontext

// Members reads the JSON object b one member at a time, for decoders that
// know their fields: fn gets each member's name (unescaped; valid only
// during the call) and the exact bytes of its value. It refuses what
// Validate(b, maxDepth) refuses, duplicate names included, and stops at
// fn's first error, returning it.
func Members(b []byte, maxDepth int, fn func(name []byte, value []byte) error) error {
	v := validator{in: b, maxDepth: maxDepth}
	v.ws()
	if v.i >= len(v.in) || v.in[v.i] != '{' {
		return v.fail(KindSyntax)
	}
	v.i++
	var small [smallObject][]byte
	names := small[:0]
	var many map[string]struct{}
	v.ws()
	if v.i < len(v.in) && v.in[v.i] == '}' {
		v.i++
		return v.end()
	}
	for {
		v.ws()
		if v.i >= len(v.in) || v.in[v.i] != '"' {
			return v.fail(KindSyntax)
		}
		at := v.i
		raw, escaped, err := v.str(true)
		if err != nil {
			return err
		}
		name := raw
		if escaped {
			name = v.scratch
		}
		dup := false
		if many != nil {
			_, dup = many[string(name)]
		} else {
			for _, n := range names {
				if string(n) == string(name) {
					dup = true
					break
				}
			}
		}
		if dup {
			v.push(step{name: name, index: -1})
			return &Error{Kind: KindDuplicateKey, Offset: at, Path: v.pointer()}
		}
		switch {
		case many != nil:
			many[string(name)] = struct{}{}
		case len(names) < smallObject:
			if escaped {
				name = append([]byte(nil), name...) // scratch is reused
			}
			names = append(names, name)
		default:
			many = make(map[string]struct{}, 2*smallObject)
			for _, n := range names {
				many[string(n)] = struct{}{}
			}
			many[string(name)] = struct{}{}
		}
		v.ws()
		if v.i >= len(v.in) || v.in[v.i] != ':' {
			return v.fail(KindSyntax)
		}
		v.i++
		v.ws()
		start := v.i
		v.push(step{name: name, index: -1})
		err = v.value(1)
		v.depth--
		if err != nil {
			return err
		}
		if err := fn(name, v.in[start:v.i]); err != nil {
			return err
		}
		v.ws()
		if v.i >= len(v.in) {
			return v.fail(KindSyntax)
		}
		switch v.in[v.i] {
		case ',':
			v.i++
		case '}':
			v.i++
			return v.end()
		default:
			return v.fail(KindSyntax)
		}
	}
}

// end refuses anything but white space after the document.
func (v *validator) end() error {
	v.ws()
	if v.i != len(v.in) {
		return v.fail(KindSyntax)
	}
	return nil
}

// Unquote decodes the JSON string literal b (its quotes included) as
// encoding/json would, refusing what Decode refuses in a string: invalid
// UTF-8, lone surrogate escapes and control characters.
func Unquote(b []byte) (string, error) {
	if len(b) < 2 || b[0] != '"' {
		return "", ErrSyntax
	}
	// Without escapes the text between the quotes is the string.
	plain := true
	for _, c := range b[1 : len(b)-1] {
		if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain && b[len(b)-1] == '"' {
		return string(b[1 : len(b)-1]), nil
	}
	d := valueDecoder{s: string(b)}
	s, err := d.str()
	if err != nil {
		return "", err
	}
	if d.i != len(d.s) {
		return "", ErrSyntax
	}
	return s, nil
}
