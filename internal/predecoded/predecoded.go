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

import "pigeon/internal/datapath"

// Data is one message's data decoded by jsontext.DecodeDocument with
// the engine's nesting limit (pigeon.MaxJSONDepth): Value decoded from
// Text, which the decoder copied and nothing else holds, Names the
// summary of Value's top-level member names, and Exact what the decoder
// found of its numbers (jsontext.Document.Exact).
type Data struct {
	Value any
	Text  []byte
	Names datapath.Names
	Exact bool
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
