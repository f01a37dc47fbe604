// Package predecoded carries a message's data, decoded by the WebSocket
// server's frame decoder or the HTTP server's envelope decoder, to the
// engine, so that data read from the network is checked and decoded once
// rather than validated by the transport's decoder and decoded again by
// the engine.
//
// Only the broker's own packages can attach decoded data to a message:
// the package is internal, and the field that holds it is unexported. The
// engine uses it only while the message's Data is still Data.Text, the
// decoder's own copy of the bytes, which nothing writes to; otherwise it
// decodes Data itself, as for any message.
package predecoded

import (
	"sync"

	"pigeon/internal/datapath"
	"pigeon/internal/jsontext"
)

// Data is one message's data decoded with the engine's nesting limit
// (pigeon.MaxJSONDepth): Value decoded from Text, which the decoder
// copied and nothing else holds, Names the summary of Value's top-level
// member names, and Exact what the decoder found of its numbers
// (jsontext.Document.Exact).
//
// Value is in the flat form (jsontext.DecodeFlat) when Arena is not
// nil, and kept in Arena's memory: it is read once, by the engine, which
// takes it (Take) and gives Arena back to Arenas once nothing reads the
// value. Otherwise Value is a tree (jsontext.DecodeDocument).
type Data struct {
	Value any
	Text  []byte
	Names datapath.Names
	Exact bool
	Arena *jsontext.Arena
}

// Arenas holds the memory of data decoded in the flat form, by the
// transports (Decode) and by the engine, which gives it back.
var Arenas = sync.Pool{New: func() any { return new(jsontext.Arena) }}

// Decode decodes b, one JSON value, into d in the flat form
// (jsontext.DecodeFlat, nested at most maxDepth levels) in an arena of
// Arenas, and reports whether b decoded. When it did not, d is left
// empty and the arena is given back.
func (d *Data) Decode(b []byte, maxDepth int) bool {
	ar := Arenas.Get().(*jsontext.Arena)
	doc, err := jsontext.DecodeFlat(b, maxDepth, &d.Names, ar)
	if err != nil {
		Free(ar)
		*d = Data{}
		return false
	}
	d.Value, d.Text, d.Exact, d.Arena = doc.Value, doc.Text, doc.Exact, ar
	return true
}

// Take returns d, and leaves it without its flat value: a copy of a
// message that still carries d finds no Text to use (a flat value is
// read once, and its arena's memory is used again after). A tree value
// is left, read-only, as it is.
func (d *Data) Take() Data {
	t := *d
	if d.Arena != nil {
		*d = Data{}
	}
	return t
}

// Free gives ar, whose values nothing reads any more, back to Arenas.
func Free(ar *jsontext.Arena) {
	ar.Reuse()
	Arenas.Put(ar)
}

// Attach gives m, a *pigeon.Message whose Data is d.Text, its decoded
// data. Package pigeon sets it; it is nil only before pigeon's
// initialization.
var Attach func(m any, d *Data)

// DecodeMessage is pigeon.DecodeMessage for a caller that hands the
// *pigeon.Message it returns to the engine as it is, writing nothing to
// its Data (the HTTP server's publish): the message's data, when the
// envelope is read in one pass, is decoded in that pass and attached, so
// that the engine does not decode it again. A refusal is
// pigeon.DecodeMessage's. Package pigeon sets it.
var DecodeMessage func(b []byte) (any, error)
