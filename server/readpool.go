package server

import (
	"pigeon"
	"pigeon/internal/readpool"
)

// DefaultMaxReadBytesInFlight is Options.MaxReadBytesInFlight when it is 0.
const DefaultMaxReadBytesInFlight = readpool.DefaultLimit

// readWait bounds how long a read waits for room in the server's read
// pool before it is refused. A variable so that tests need not wait that
// long; read when a Server is made.
var readWait = readpool.DefaultWait

// quarantineCost is readpool.Cost for quarantine records.
func quarantineCost(recs []pigeon.QuarantineRecord) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Body))
	}
	return readpool.Cost(len(recs), n)
}

// auditCost is readpool.Cost for audit records: each field is at most 512
// bytes (pigeon.AuditRecord), most far less.
func auditCost(recs []pigeon.AuditRecord) int64 {
	var n int64
	for i := range recs {
		r := &recs[i]
		n += int64(len(r.Subject) + len(r.Principal) + len(r.ContractID) + len(r.PolicyID) + len(r.SchemaID) +
			len(r.MessageID) + len(r.Ref) + len(r.Seqs) + len(r.Digest) + len(r.Gate) + len(r.Hash) + len(r.PrevHash))
	}
	return readpool.Cost(len(recs), n)
}

// reserveRead reserves, in the server's read pool and the share of the
// request's principal (see Options.MaxReadBytesInFlight and
// MaxReadBytesPerPrincipal, and package readpool), room for the engine's
// largest answer before the read; the route's answer gives it back once
// written.
//
// A read refused RATE_LIMITED, for want of room, is audited
// (boundDenied) as ev, the event of a refusal of the read (receive.denied,
// replay.denied; access.denied for a read of the audit log or of the
// quarantine), naming the contract and the subject the read names, if
// any, and the bound: Ref "<route> read budget". A read whose request
// ended while it waited (REQUEST_TIMEOUT) was refused by no bound and
// leaves no record.
func (rq *request) reserveRead(ev pigeon.Event, contractID, subject string) error {
	var src pigeon.Source // whence an anonymous caller reads: none reaches here today
	if rq.p == nil {
		src = pigeon.SourceOf(rq.r.RemoteAddr)
	}
	rq.reader, rq.read = readpool.KeyOf(rq.p, src), true
	n, err := rq.s.reads.Reserve(rq.ctx, rq.reader, readpool.ReadReserve(rq.s.e))
	rq.held = n
	if err != nil && pigeon.ErrorCode(err) == pigeon.CodeRateLimited {
		rq.boundDenied(ev, boundReadBudget, contractID, subject, "")
	}
	return err
}

// keepRead keeps, of the read's reservation, n bytes.
func (rq *request) keepRead(n int64) {
	rq.held = rq.s.reads.Resize(rq.reader, rq.held, n)
}
