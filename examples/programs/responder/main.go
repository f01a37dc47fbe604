//go:build wasip1

// Command responder is a Pigeon program that answers requests: bound to
// a request/reply subject, it replies to each request with a quote for
// the requested item ({"item": "x", "qty": 2} gets
// {"item": "x", "qty": 2, "price": 2 * PRICE}), PRICE coming from the
// environment the manifest sets.
package main

import (
	"errors"
	"os"
	"strconv"

	"pigeon/programs/guest"
)

func main() {}

func init() {
	price, _ := strconv.Atoi(os.Getenv("PRICE"))
	guest.Handle(func(m *guest.Message) error {
		var req struct {
			Item string `json:"item"`
			Qty  int    `json:"qty"`
		}
		if err := m.Decode(&req); err != nil {
			return err
		}
		if req.Item == "" {
			return errors.New("responder: a request names an item")
		}
		r := &guest.Message{Type: "quote", Intent: m.Intent, Classification: m.Classification}
		if err := r.SetData(map[string]any{"item": req.Item, "qty": req.Qty, "price": req.Qty * price}); err != nil {
			return err
		}
		return guest.Reply(r)
	})
}
