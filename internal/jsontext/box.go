package jsontext

import "unsafe"

// Decode returns its strings and numbers as interface values, and putting
// a string or a float64 into an interface normally allocates a copy of it
// on the heap, one allocation per value. A payment's data holds a dozen of
// them, so instead the decoder keeps the values of one document in slabs
// (a few chunks of []string and []float64, allocated as needed) and makes
// each interface value point at its slab element, as the runtime's own
// conversion points at its fresh copy. An element is written once, before
// its interface value exists, and never again; the garbage collector keeps
// a chunk alive while any value points into it, and the values of one
// document live and die together.

// eface is the runtime's layout of an empty interface value: its dynamic
// type and a pointer to its value.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

var (
	stringType = typeOf("")
	floatType  = typeOf(float64(0))
	objectType = typeOf(Object(nil))
)

func typeOf(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

// box returns the interface value of type typ holding *p. p must point at
// a value of that type that is never written again.
func box(typ, p unsafe.Pointer) (v any) {
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, p
	return v
}

// slabs hands out the slab elements of one document, or of the documents
// decoded in an Arena (flat.go) until it is reused.
type slabs struct {
	strs    []string
	floats  []float64
	hint    int      // the first string chunk's size
	members []Member // the members of a flat document's objects (DecodeFlat)
	objects []Object // and the objects, each a run of members
}

// Chunk sizes: the first string chunk is sized from the document's length
// (about one string value per 24 bytes of text), later chunks double, up
// to maxChunk so that one long document does not pin a huge chunk for a
// value that outlives the rest.
const (
	minChunk = 4
	maxChunk = 256
)

func (s *slabs) str(v string) any {
	if len(s.strs) == cap(s.strs) {
		s.strs = make([]string, 0, nextChunk(cap(s.strs), s.hint))
	}
	s.strs = append(s.strs, v)
	return box(stringType, unsafe.Pointer(&s.strs[len(s.strs)-1]))
}

func (s *slabs) float(v float64) any {
	if len(s.floats) == cap(s.floats) {
		s.floats = make([]float64, 0, nextChunk(cap(s.floats), minChunk))
	}
	s.floats = append(s.floats, v)
	return box(floatType, unsafe.Pointer(&s.floats[len(s.floats)-1]))
}

// object returns the interface value of an Object holding a copy of ms:
// the members go in a chunk of members, the Object (a slice over them)
// in a chunk of Objects, so that a small document's objects cost two
// allocations, not two each.
func (s *slabs) object(ms []Member) any {
	if cap(s.members)-len(s.members) < len(ms) {
		s.members = make([]Member, 0, max(nextChunk(cap(s.members), s.hint+1), len(ms)))
	}
	start := len(s.members)
	s.members = append(s.members, ms...)
	if len(s.objects) == cap(s.objects) {
		s.objects = make([]Object, 0, nextChunk(cap(s.objects), minChunk))
	}
	s.objects = append(s.objects, Object(s.members[start:len(s.members):len(s.members)]))
	return box(objectType, unsafe.Pointer(&s.objects[len(s.objects)-1]))
}

func nextChunk(prev, first int) int {
	if prev == 0 {
		return min(max(first, minChunk), maxChunk)
	}
	return min(2*prev, maxChunk)
}
