package pigeon_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestKnownCodesAreTheDeclaredOnes: Code.Known accepts exactly the Code
// constants errors.go declares (CodeOK aside), so a new code needs its
// line there, and refuses text that only looks like a code.
func TestKnownCodesAreTheDeclaredOnes(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	require.NoError(t, err)
	declared := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				if c := pigeon.Code(s); c != pigeon.CodeOK {
					require.True(t, c.Known(), "%s is declared but not Known", c)
					declared++
				}
			}
		}
	}
	require.Greater(t, declared, 50)
	for _, c := range []pigeon.Code{pigeon.CodeOK, "", "unauthenticated", "UNAUTHENTICATED ", "write stalled", "NOT_A_CODE"} {
		require.False(t, c.Known(), "%q", c)
	}
}
