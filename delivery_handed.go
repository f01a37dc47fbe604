package pigeon

import "unsafe"

// handedCopy is a synchronous handler's Delivery and its deep copy of the
// message, signature and data included, in one allocation: the data goes
// in buf, which is sized for it (handed). buf comes last, so the garbage
// collector scans no further than the pointers before it.
type handedCopy[B any] struct {
	d   Delivery
	m   Message
	sig Signature
	buf B
}

// handed returns a Delivery of a deep copy of m (Message.cloneIn): the
// handler may change it, or keep it, without changing what any other
// receiver gets. Data of up to a few kilobytes shares the Delivery's
// allocation, in room of one of a few sizes, each of which makes the
// allocation fill one of the allocator's size classes; larger data is
// copied on its own.
func handed(m *Message) *Delivery {
	switch n := len(m.Data); {
	case n <= 128:
		return handedIn[[128]byte](m)
	case n <= 320:
		return handedIn[[320]byte](m)
	case n <= 576:
		return handedIn[[576]byte](m)
	case n <= 1088:
		return handedIn[[1088]byte](m)
	case n <= 2240:
		return handedIn[[2240]byte](m)
	}
	c := new(handedCopy[struct{}])
	m.cloneIn(&c.m, nil, &c.sig)
	c.d.Message = &c.m
	return &c.d
}

// handedIn is handed for data that fits in B, an array of bytes.
func handedIn[B any](m *Message) *Delivery {
	c := new(handedCopy[B])
	m.cloneIn(&c.m, unsafe.Slice((*byte)(unsafe.Pointer(&c.buf)), unsafe.Sizeof(c.buf)), &c.sig)
	c.d.Message = &c.m
	return &c.d
}
