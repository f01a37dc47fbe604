package programs

import (
	"reflect"

	"github.com/tetratelabs/wazero"
)

// CompiledModules is how many modules (the programs' and the host
// modules) c holds compiled, over its engines, read out of wazero's
// cache (its engines' maps of compiled modules); -1 when it cannot tell
// (another wazero).
func CompiledModules(c wazero.CompilationCache) int {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return -1
	}
	engs := v.Elem().FieldByName("engs")
	if engs.Kind() != reflect.Array {
		return -1
	}
	n := 0
	for i := range engs.Len() {
		e := engs.Index(i)
		if e.IsNil() {
			continue
		}
		e = e.Elem()
		if e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		m := e.FieldByName("compiledModules")
		if !m.IsValid() {
			m = e.FieldByName("compiledFunctions")
		}
		if m.Kind() != reflect.Map {
			return -1
		}
		n += m.Len()
	}
	return n
}
