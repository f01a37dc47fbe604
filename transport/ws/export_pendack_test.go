package ws

import "pigeon"

// PendAck records an acknowledgement of id on sub as a handler's success
// does, without waking the loop that sends them: the next flush (an
// Unsubscribe's, a Close's) sends it.
func PendAck(sub pigeon.Subscription, id string) {
	cs := sub.(*clientSub)
	cs.mu.Lock()
	sid, cc := cs.sid, cs.sidConn
	cs.mu.Unlock()
	cs.ackMu.Lock()
	cs.acks = append(cs.acks, pendingAck{cc: cc, sid: sid, id: id})
	cs.ackMu.Unlock()
}
