package wire

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"pigeon"
)

// MaxMessage bounds the message of an error a client is told (Public).
const MaxMessage = 512

// storeCorruptMessage is a store's damage as the client is told it.
const storeCorruptMessage = "the store found damaged data; the server's log says where"

// Public is err as a client is told it, over HTTP or WebSocket, keeping
// its code and details:
//   - a store's damage (STORE_CORRUPT) is said without its cause, which
//     names the file and the offset on the server's disk
//     (store.CorruptError): where the server keeps its data is the
//     operator's to know (the server and the WebSocket transport log it),
//     not every client's whose read or publish met it;
//   - the message is cut, on a character boundary, to MaxMessage bytes and
//     marked "…(cut from N bytes)": a refusal may quote what the caller
//     sent (an unknown subject, from a path any client may choose, or a
//     body or frame of up to its limit); the answer names it, but is
//     never a mirror of the request.
func Public(err error) error {
	var pe *pigeon.Error
	if !errors.As(err, &pe) {
		return err
	}
	msg := pe.Message
	if pe.Code == pigeon.CodeStoreCorrupt {
		msg = storeCorruptMessage
	}
	msg = CutText(msg, MaxMessage)
	if msg == pe.Message {
		return err
	}
	c := *pe
	c.Message = msg
	return &c
}

// CutText is s cut on a character boundary to at most n bytes and marked
// with the length it had, or s when it fits.
func CutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…(cut from " + strconv.Itoa(len(s)) + " bytes)"
}
