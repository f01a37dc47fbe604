//go:build wasip1

// Command enricher is a Pigeon program: it adds a field to each message's
// data and republishes it to another subject. The field's name and value
// and the target subject come from the environment the manifest sets
// (ENRICH_FIELD, ENRICH_VALUE, ENRICH_TO).
package main

import (
	"os"

	"pigeon/programs/guest"
)

func main() {}

func init() {
	guest.Handle(func(m *guest.Message) error {
		var data map[string]any
		if err := m.Decode(&data); err != nil {
			return err
		}
		if data == nil {
			data = map[string]any{}
		}
		data[os.Getenv("ENRICH_FIELD")] = os.Getenv("ENRICH_VALUE")
		out := &guest.Message{Type: m.Type, Subject: os.Getenv("ENRICH_TO"), Intent: m.Intent, Classification: m.Classification,
			IdempotencyKey: m.ID}
		if err := out.SetData(data); err != nil {
			return err
		}
		return guest.Publish(out)
	})
}
