package cli

import (
	"bytes"
	"fmt"
	"regexp"

	"gopkg.in/yaml.v3"

	"pigeon"
)

// yamlValue is the excerpt of a value yaml.v3 quotes in a decoding error
// ("cannot unmarshal !!str `abc...` into ..."): in the tokens file it may
// be a token.
var yamlValue = regexp.MustCompile("`[^`]*`")

// tokensFile is the --tokens file, YAML or JSON:
// {"tokens": [{"token": "…", "principal": "spiffe://…", "attributes": {…}, "roles": […]}]}.
type tokensFile struct {
	Tokens []pigeon.StaticToken `yaml:"tokens"`
}

// loadTokens reads a tokens file. Every entry needs a token and a
// principal, and a token may appear once; each is checked with
// pigeon.StaticToken.Validate (a principal and roles that are ids,
// attributes within the directory's bounds).
func loadTokens(path string) ([]pigeon.StaticToken, error) {
	if err := checkNotWorldWritable(path); err != nil {
		return nil, err
	}
	b, err := readRegularFile(path, maxConfigFile)
	if err != nil {
		return nil, err
	}
	var f tokensFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %s", path, yamlValue.ReplaceAllString(err.Error(), "a value"))
	}
	seen := map[string]bool{}
	for i, t := range f.Tokens {
		switch {
		case t.Token == "":
			return nil, fmt.Errorf("%s: tokens[%d] has no token", path, i)
		case t.Principal == "":
			return nil, fmt.Errorf("%s: tokens[%d] has no principal", path, i)
		case seen[t.Token]:
			return nil, fmt.Errorf("%s: tokens[%d] repeats a token", path, i)
		}
		if err := t.Validate(); err != nil {
			// The principal's id, roles and attributes as the directory
			// takes an account's: the error names the principal, not the
			// token.
			return nil, fmt.Errorf("%s: tokens[%d]: %w", path, i, err)
		}
		seen[t.Token] = true
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	return f.Tokens, nil
}
