package pigeon

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// MarshalJSON encodes a Start as the wire protocols carry it: "new",
// "first" or {"sequence":N}.
func (s Start) MarshalJSON() ([]byte, error) {
	switch s.kind {
	case 1:
		return []byte(`"first"`), nil
	case 2:
		return append(strconv.AppendUint([]byte(`{"sequence":`), s.seq, 10), '}'), nil
	}
	return []byte(`"new"`), nil
}

// UnmarshalJSON decodes "new", "first" or {"sequence":N} with N >= 1;
// anything else fails with INVALID_ARGUMENT.
func (s *Start) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case `"new"`, `null`:
		*s = StartNew
		return nil
	case `"first"`:
		*s = StartFirst
		return nil
	}
	var v struct {
		Sequence *uint64 `json:"sequence"`
	}
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &v) != nil || v.Sequence == nil || *v.Sequence == 0 {
		return NewError(CodeInvalidArgument, `start must be "new", "first" or {"sequence": N} with N >= 1`)
	}
	*s = StartAt(*v.Sequence)
	return nil
}
