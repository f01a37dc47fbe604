//go:build wasip1

package guest

import "unsafe"

//go:wasmimport pigeon publish
func hostPublish(msg unsafe.Pointer, msgLen uint32, errBuf unsafe.Pointer, errCap uint32) uint32

//go:wasmimport pigeon reply
func hostReply(msg unsafe.Pointer, msgLen uint32, errBuf unsafe.Pointer, errCap uint32) uint32

//go:wasmimport pigeon log
func hostLog(level int32, msg unsafe.Pointer, msgLen uint32)

var (
	handler Handler
	input   []byte // the buffer pigeon_alloc handed out, kept alive until pigeon_handle
	errBuf  [64]byte
	outBuf  []byte // reused for the messages emitted
)

// Handle registers h as the program's handler. Call it from init or main.
func Handle(h Handler) { handler = h }

// Publish publishes m under the program's account and contract, through
// every gate. It returns an *Error with the broker's code when the message
// is refused or the program emitted its limit.
func Publish(m *Message) error { return send(hostPublish, m) }

// Reply answers the request being handled with m (its data and envelope
// fields); the broker sets its subject and correlation id.
func Reply(m *Message) error { return send(hostReply, m) }

// Log writes msg to the broker's log at level (LevelInfo, …), with the
// program's name.
func Log(level int, msg string) {
	hostLog(int32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

func send(fn func(unsafe.Pointer, uint32, unsafe.Pointer, uint32) uint32, m *Message) error {
	b, err := appendMessage(outBuf[:0], m)
	outBuf = b
	if err != nil {
		return err
	}
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	if n := fn(p, uint32(len(b)), unsafe.Pointer(&errBuf[0]), uint32(len(errBuf))); n > 0 {
		return &Error{Code: string(errBuf[:min(n, uint32(len(errBuf)))])} // n is the code's whole length when it did not fit
	}
	return nil
}

//go:wasmexport pigeon_alloc
func pigeonAlloc(n uint32) unsafe.Pointer {
	input = make([]byte, max(n, 1))
	return unsafe.Pointer(&input[0])
}

//go:wasmexport pigeon_handle
func pigeonHandle(msg unsafe.Pointer, msgLen uint32) uint32 {
	in := unsafe.Slice((*byte)(msg), msgLen)
	defer func() { input = nil }()
	if handler == nil {
		Log(LevelError, ErrNoHandler.Error())
		return 1
	}
	var m Message
	if err := decodeMessage(in, &m); err != nil {
		Log(LevelError, "guest: decode the message: "+err.Error())
		return 1
	}
	if err := handler(&m); err != nil {
		Log(LevelError, err.Error())
		return 1
	}
	return 0
}
