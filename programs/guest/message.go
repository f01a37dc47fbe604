package guest

import (
	"encoding/json"
	"errors"
)

// Message is a Pigeon message as a program sees it: the envelope of
// docs/protocol.md, with Data left as raw JSON.
type Message struct {
	ID             string          `json:"id,omitempty"`
	Type           string          `json:"type,omitempty"`
	Source         string          `json:"source,omitempty"`
	Subject        string          `json:"subject,omitempty"`
	Time           string          `json:"time,omitempty"`
	Intent         string          `json:"intent,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Classification string          `json:"classification,omitempty"`
	Region         string          `json:"region,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	ReplyTo        string          `json:"replyTo,omitempty"`
	CorrelationID  string          `json:"correlationId,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	Sequence       uint64          `json:"sequence,omitempty"`
}

// Decode unmarshals the message's data into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Data, v) }

// SetData marshals v as the message's data.
func (m *Message) SetData(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m.Data = b
	return nil
}

// Handler handles one delivery. Returning an error fails it.
type Handler func(m *Message) error

// Error is a refusal the broker answered a Publish or Reply with; Code is
// its stable code (SENSITIVE_FIELD_DENIED, LIMIT_EXCEEDED, …).
type Error struct{ Code string }

func (e *Error) Error() string { return "pigeon: " + e.Code }

// ErrNoHandler is what a delivery fails with when no handler was registered.
var ErrNoHandler = errors.New("guest: no handler registered")

// Log levels, as log/slog numbers them.
const (
	LevelDebug = -4
	LevelInfo  = 0
	LevelWarn  = 4
	LevelError = 8
)
