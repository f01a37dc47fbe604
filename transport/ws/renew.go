package ws

import (
	"context"
	"encoding/json"
	"time"

	"pigeon"
)

// Renew moves the expiry of the session's contract later, by the lifetime
// the session negotiates with (pigeon.WithContractTTL; the broker's
// default otherwise), keeping its id: subscriptions, and everything else
// running under it, go on (pigeon.Engine.RenewContract). The broker does
// not take a contract past the credential the connection was opened with;
// beyond it, Reconnect with a fresh credential.
//
// A session renews by itself shortly before it expires (pigeon.RenewLead
// ahead: a tenth of its remaining life, at least 5 s or, for a shorter
// life, half of it), unless dialed with pigeon.WithoutAutoRenew (through
// WithConnectOptions); a renewal that fails
// is tried again until the contract expires, and the failures are logged
// (WithLogger). Renewals of one contract that succeed are at least 1 s
// apart (or a quarter of the lifetime the session asks for
// with pigeon.WithContractTTL when that is shorter): a server that grants
// renewals a few milliseconds long cannot make the session renew every
// few milliseconds. A contract that would expire before the next renewal
// the floor allows is renewed no more, as one the credential keeps from
// going further: it ends at its expiry unless Reconnect or Negotiate
// replaces it (logged once).
func (s *Session) Renew(ctx context.Context) (pigeon.Contract, error) {
	cc, err := s.conn()
	if err != nil {
		return nil, err
	}
	f, err := cc.call(ctx, jsonFrame(Frame{Op: OpRenew, TTLMs: s.o.connect.ContractTTL.Milliseconds()}), nil)
	if err != nil {
		return nil, err
	}
	var info pigeon.ContractInfo
	if err := json.Unmarshal(f.Contract, &info); err != nil {
		return nil, pigeon.WrapError(pigeon.CodeInternal, err, "undecodable contract from server")
	}
	k := info.View()
	s.mu.Lock()
	if s.cc == cc && s.contract.ID() == k.ID() {
		s.contract = k
	}
	s.mu.Unlock()
	return k, nil
}

// renewLoop renews the session's contract shortly before it expires
// (pigeon.RenewDelay), until Close. After a failure it tries again
// (pigeon.RenewRetry) until the contract expires, unless the refusal is
// final (pigeon.RenewalFinal: revoked, say); then it waits for a new
// contract (Reconnect, Negotiate).
func (s *Session) renewLoop() {
	var (
		last    time.Time     // an expiry a renewal could not move (the credential's end): waited out
		retry   time.Duration // after a failure: when to try again
		renewed time.Time     // when the last renewal that succeeded was asked for…
		of      string        // …and of which contract
		floor   = s.renewFloor()
		timer   = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		k := s.Contract()
		exp := k.ExpiresAt()
		left := time.Until(exp)
		wait := pigeon.RenewDelay(left, retry)
		if retry == 0 && left > 0 && !exp.Equal(last) && k.ID() == of {
			// Renewals that succeed are floor apart at least; one the
			// floor puts at or past the expiry does not come.
			if next := time.Until(renewed.Add(floor)); next > wait {
				if next >= left {
					last = exp
					s.o.logger.Warn("pigeon: the server renews the contract for too short a time to renew it again before it expires; it ends at its expiry unless Reconnect or Negotiate replaces it",
						"contract", k.ID(), "expires", exp, "floor", floor)
				} else {
					wait = next
				}
			}
		}
		if left <= 0 || exp.Equal(last) {
			wait = max(left, time.Second) // expired, renewed as far as it goes or refused for good: wait for a new contract
		}
		retry = 0
		timer.Reset(wait)
		select {
		case <-s.closing:
			return
		case <-timer.C:
		}
		if !s.Contract().ExpiresAt().Equal(exp) || time.Until(exp) <= 0 || exp.Equal(last) {
			continue // renewed or replaced meanwhile, or nothing to do
		}
		asked := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		k, err := s.Renew(ctx)
		cancel()
		if err == nil {
			renewed, of = asked, k.ID()
		}
		switch {
		case pigeon.RenewalFinal(err):
			last = exp
			s.o.logger.Warn("pigeon: the contract cannot be renewed; it ends at its expiry unless Reconnect or Negotiate replaces it", "contract", s.Contract().ID(), "err", err)
		case err != nil:
			s.o.logger.Warn("pigeon: renewing the contract failed; trying again", "contract", s.Contract().ID(), "err", err)
			retry = pigeon.RenewRetry(time.Until(exp))
		case !k.ExpiresAt().After(exp):
			last = exp
			s.o.logger.Info("pigeon: the contract cannot be renewed past the connection's credential; Reconnect with a fresh one", "contract", k.ID(), "expires", exp)
		}
	}
}

// maxRenewFloor is the least time between two renewals of one contract
// that succeed, for a session that does not ask for a lifetime shorter
// than four times it.
const maxRenewFloor = time.Second

// renewFloor is the least time between two renewals of one contract that
// succeed: maxRenewFloor, or a quarter of the lifetime the session asks
// for when that is shorter, so that a session that asks for short
// contracts still renews each (at half its life) before it expires. The
// session's own request sets it, never the server's answers: a server
// that grants ever shorter renewals cannot drive the session faster.
func (s *Session) renewFloor() time.Duration {
	if ttl := s.o.connect.ContractTTL; ttl > 0 {
		return min(maxRenewFloor, ttl/4)
	}
	return maxRenewFloor
}
