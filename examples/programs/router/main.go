//go:build wasip1

// Command router is a Pigeon program that fans a message out by content:
// the value of the data field ROUTE_FIELD names, looked up in ROUTES
// ("eu=orders.eu,us=orders.us,*=orders.other"), gives the subjects the
// message is republished to; a value may list several subjects separated
// by '+' ("vip=orders.vip+orders.audit"). "*" routes every other value.
package main

import (
	"fmt"
	"os"
	"strings"

	"pigeon/programs/guest"
)

func main() {}

func init() {
	field := os.Getenv("ROUTE_FIELD")
	routes := map[string][]string{}
	for _, r := range strings.Split(os.Getenv("ROUTES"), ",") {
		if k, v, ok := strings.Cut(r, "="); ok {
			routes[k] = strings.Split(v, "+")
		}
	}
	guest.Handle(func(m *guest.Message) error {
		var data map[string]any
		if err := m.Decode(&data); err != nil {
			return err
		}
		key := fmt.Sprint(data[field])
		to, ok := routes[key]
		if !ok {
			to = routes["*"]
		}
		for _, subject := range to {
			out := &guest.Message{Type: m.Type, Subject: subject, Intent: m.Intent, Classification: m.Classification, Data: m.Data,
				IdempotencyKey: m.ID + ":" + subject}
			if err := guest.Publish(out); err != nil {
				return err
			}
		}
		return nil
	})
}
