package pigeon

import "encoding/json"

// unmarshalEnvelope decodes the JSON envelope b into m exactly as
// json.Unmarshal does: in one pass for the envelopes the broker writes
// and clients send (decodeEnvelope), through encoding/json for any other
// text. A differential fuzz test holds the two to the same result.
func unmarshalEnvelope(b []byte, m *Message) error {
	if f := decodeEnvelope(b); f != nil {
		*m = *f
		return nil
	}
	return json.Unmarshal(b, m)
}
