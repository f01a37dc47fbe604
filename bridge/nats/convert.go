package natsbridge

import (
	"bytes"
	"encoding/json"

	"pigeon"
	"pigeon/internal/jsontext"
)

// convert turns the payload of one NATS message into the message an In
// route publishes: an envelope decoded with pigeon.DecodeMessage, or plain
// data under the route's Template (see Payload). The route's Subject
// replaces any subject the payload names, id (when not empty) any id, and
// the source and the fields the broker fills on acceptance (sequence,
// contractId, subjectId, schemaId, acceptedAt, hops) are cleared: the
// broker sets them. hops is the depth the envelope carried (0 for data),
// from which the route counts its pass (Options.MaxHops); DecodeMessage
// refuses one that is no integer of 0 to 2^32-1, ENVELOPE_INVALID. Text
// that readers could decode differently is refused as the gates refuse it
// (DUPLICATE_KEY, INVALID_UTF8), and a payload that is not JSON with
// ENVELOPE_INVALID, before it reaches the broker (an empty payload is
// data-less; one of white space alone is not JSON). The error never
// quotes the payload.
func convert(r *Route, payload []byte, id string) (m *pigeon.Message, hops uint32, err error) {
	// An empty payload is a message without data; one of white space
	// alone is no JSON text, and is refused rather than carried as none.
	if len(payload) > 0 {
		if err := pigeon.CheckJSON(payload); err != nil {
			if c := pigeon.ErrorCode(err); c != pigeon.CodeDuplicateKey && c != pigeon.CodeInvalidUTF8 {
				return nil, 0, pigeon.WrapError(pigeon.CodeEnvelopeInvalid, err, "the payload is not JSON")
			}
			return nil, 0, err
		}
	}
	if isEnvelope(r.Payload, payload) {
		if m, err = pigeon.DecodeMessage(payload); err != nil {
			return nil, 0, err
		}
	} else {
		t := r.Template
		m = &pigeon.Message{Type: t.Type, Intent: t.Intent, Classification: t.Classification, Region: t.Region}
		if len(payload) > 0 {
			m.Data = json.RawMessage(payload)
		}
	}
	// CheckJSON allows the levels of an envelope and a frame around the
	// data; the data itself may nest MaxJSONDepth levels, and the broker's
	// WebSocket server does not read a frame nesting deeper (it leaves it
	// unanswered: the publish would time out, at each redelivery).
	if jsontext.Depth(m.Data) > pigeon.MaxJSONDepth {
		return nil, 0, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "data nests deeper than %d levels", pigeon.MaxJSONDepth)
	}
	m.Subject = r.Subject
	if id != "" {
		m.ID = id
	}
	m.Source, hops = "", m.Hops
	m.Sequence, m.ContractID, m.SubjectID, m.SchemaID, m.AcceptedAt, m.Hops = 0, "", "", "", "", 0
	return m, hops, nil
}

// isEnvelope reports whether payload, which CheckJSON accepted (or which
// is empty), is read as an envelope under mode.
func isEnvelope(mode Payload, payload []byte) bool {
	switch mode {
	case PayloadEnvelope:
		return true
	case PayloadData:
		return false
	}
	p := bytes.TrimSpace(payload)
	if len(p) == 0 || p[0] != '{' {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(p, &members) != nil {
		return false
	}
	_, spec := members["specversion"]
	_, typ := members["type"]
	_, data := members["data"]
	return spec || typ && data
}
