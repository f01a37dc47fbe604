package pigeon

import (
	"encoding/json"
	"errors"
	"strconv"

	"pigeon/internal/jsontext"
)

// errOther stops decodeEnvelope at text it leaves to encoding/json.
var errOther = errors.New("pigeon: envelope decoded by encoding/json")

// unmarshalEnvelope decodes the JSON envelope b into m as json.Unmarshal
// does, without reflection for the envelopes the broker writes and
// clients send: the member names exactly as Message.AppendJSON writes
// them, with string values (an object for signature, a number for
// sequence). Anything else — another spelling of a name, a null, a value
// of another type, a duplicate member, text jsontext refuses — is decoded
// by encoding/json, so the result is always json.Unmarshal's (a
// differential fuzz test holds the two to it).
func unmarshalEnvelope(b []byte, m *Message) error {
	var fast Message
	if jsontext.Members(b, edgeDepth, fast.member) == nil {
		*m = fast
		return nil
	}
	return json.Unmarshal(b, m)
}

// member decodes one envelope member; errOther leaves the envelope to
// encoding/json.
func (m *Message) member(name, v []byte) error {
	if string(name) == "data" {
		m.Data = json.RawMessage(append([]byte(nil), v...))
		return nil
	}
	if string(name) == "sequence" {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return errOther
		}
		m.Sequence = n
		return nil
	}
	if string(name) == "signature" {
		return m.signature(v)
	}
	f := m.field(name)
	if f == nil || len(v) == 0 || v[0] != '"' {
		return errOther
	}
	s, err := jsontext.Unquote(v)
	if err != nil {
		return errOther
	}
	*f = s
	return nil
}

// field is the string field named name, nil for another name.
func (m *Message) field(name []byte) *string {
	switch string(name) {
	case "specversion":
		return &m.SpecVersion
	case "id":
		return &m.ID
	case "type":
		return &m.Type
	case "source":
		return &m.Source
	case "subject":
		return &m.Subject
	case "time":
		return &m.Time
	case "intent":
		return &m.Intent
	case "idempotencyKey":
		return &m.IdempotencyKey
	case "classification":
		return &m.Classification
	case "region":
		return &m.Region
	case "replyTo":
		return &m.ReplyTo
	case "correlationId":
		return &m.CorrelationID
	case "reason":
		return &m.Reason
	case "contractId":
		return &m.ContractID
	case "subjectId":
		return &m.SubjectID
	case "schemaId":
		return &m.SchemaID
	case "acceptedAt":
		return &m.AcceptedAt
	}
	return nil
}

func (m *Message) signature(v []byte) error {
	var g Signature
	err := jsontext.Members(v, 1, func(name, v []byte) error {
		var f *string
		switch string(name) {
		case "kid":
			f = &g.KID
		case "alg":
			f = &g.Alg
		case "sig":
			f = &g.Sig
		default:
			return errOther
		}
		if len(v) == 0 || v[0] != '"' {
			return errOther
		}
		s, err := jsontext.Unquote(v)
		if err != nil {
			return errOther
		}
		*f = s
		return nil
	})
	if err != nil {
		return errOther
	}
	m.Signature = &g
	return nil
}
