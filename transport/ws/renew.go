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
// beyond it, Reconnect with a fresh credential. An answer naming another
// contract than the one asked to renew fails INTERNAL and is not taken.
// Renew itself is not floored: the caller's call goes out as made.
//
// A session renews by itself shortly before it expires (pigeon.RenewLead
// ahead: a tenth of its remaining life, at least 5 s or, for a shorter
// life, half of it), unless dialed with pigeon.WithoutAutoRenew (through
// WithConnectOptions); a renewal that fails is tried again until the
// contract expires (pigeon.RenewRetry), and the failures are logged
// (WithLogger). Every renewal of one contract the session sends by itself,
// whatever became of the last, comes a floor after the last at least: a
// quarter of the lifetime the contract was negotiated for, between 100 ms
// and 1 s (the lower bound is a quarter of the lifetime the session asks
// for with pigeon.WithContractTTL when that is shorter). A contract so
// renews, in time, for as long as it was granted at the negotiation, and a
// server cannot drive the renewals faster than one per 100 ms (or the
// session's own choice): neither by granting renewals a few milliseconds
// long, nor by failing them at once. A contract that would expire before
// the next renewal the floor allows is renewed no more, as one the
// credential keeps from going further: it ends at its expiry unless
// Reconnect replaces it (logged once).
func (s *Session) Renew(ctx context.Context) (pigeon.Contract, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errSessionClosed()
	}
	cc, id := s.cc, s.contract.ID()
	s.mu.Unlock()
	f, err := cc.call(ctx, jsonFrame(Frame{Op: OpRenew, TTLMs: s.o.connect.ContractTTL.Milliseconds()}), nil)
	if err != nil {
		return nil, err
	}
	var info pigeon.ContractInfo
	if err := json.Unmarshal(f.Contract, &info); err != nil {
		return nil, pigeon.WrapError(pigeon.CodeInternal, err, "undecodable contract from server")
	}
	k := info.View()
	if k.ID() != id {
		// A renewal keeps the contract's id: an answer for another
		// contract renewed nothing the session holds.
		return nil, pigeon.NewError(pigeon.CodeInternal, "the server answered the renewal of contract %q with contract %q", id, k.ID())
	}
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
// contract (Reconnect, Negotiate). Two renewals of one contract are the
// floor (renewFloor) apart at least, whatever became of the first.
func (s *Session) renewLoop() {
	var (
		last  time.Time     // an expiry a renewal could not move (the credential's end): waited out
		retry time.Duration // after a failure: when to try again
		tried time.Time     // when the loop last asked for a renewal…
		of    string        // …and of which contract (the session's, not the answer's)
		timer = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		k := s.Contract()
		exp := k.ExpiresAt()
		left := time.Until(exp)
		wait := pigeon.RenewDelay(left, retry)
		if left > 0 && !exp.Equal(last) && k.ID() == of {
			// Renewals are floor apart at least; one the floor puts at
			// or past the expiry does not come.
			floor := s.renewFloor()
			if next := time.Until(tried.Add(floor)); next > wait {
				if next < left {
					wait = next
				} else {
					last = exp
					if retry == 0 {
						s.o.logger.Warn("pigeon: the server renews the contract for too short a time to renew it again before it expires; it ends at its expiry unless Reconnect replaces it",
							"contract", k.ID(), "expires", exp, "floor", floor)
					} else {
						s.o.logger.Warn("pigeon: renewing the contract failed, with no time left to try again before it expires; it ends at its expiry unless Reconnect replaces it",
							"contract", k.ID(), "expires", exp, "floor", floor)
					}
				}
			}
		}
		if left <= 0 || exp.Equal(last) {
			wait = max(left, time.Second) // expired, renewed as far as it goes or refused for good: wait for a new contract
		}
		retry = 0
		timer.Reset(wait)
		select {
		case <-s.life.Done():
			return
		case <-timer.C:
		}
		if !s.Contract().ExpiresAt().Equal(exp) || time.Until(exp) <= 0 || exp.Equal(last) {
			continue // renewed or replaced meanwhile, or nothing to do
		}
		tried, of = time.Now(), k.ID()
		ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
		k, err := s.Renew(ctx)
		cancel()
		switch {
		case s.life.Err() != nil:
			return
		case pigeon.RenewalFinal(err):
			last = exp
			s.o.logger.Warn("pigeon: the contract cannot be renewed; it ends at its expiry unless Reconnect replaces it", "contract", s.Contract().ID(), "err", err)
		case err != nil:
			s.o.logger.Warn("pigeon: renewing the contract failed; trying again", "contract", s.Contract().ID(), "err", err)
			retry = pigeon.RenewRetry(time.Until(exp))
		case !k.ExpiresAt().After(exp):
			last = exp
			s.o.logger.Info("pigeon: the contract cannot be renewed past the connection's credential; Reconnect with a fresh one", "contract", k.ID(), "expires", exp)
		}
	}
}

// Bounds of the floor between two renewals of one contract (renewFloor).
const (
	maxRenewFloor = time.Second
	minRenewFloor = 100 * time.Millisecond
)

// renewFloor is the least time between two renewals of one contract that
// the session sends by itself: a quarter of the lifetime the contract was
// negotiated for (or of the lifetime the session asks for, when shorter),
// so that each is renewed (at half its life) before it expires, within
// [minRenewFloor, maxRenewFloor]. The lower bound is a quarter of the
// lifetime the session asks for when that is shorter: the session's own
// choice. The lifetime is taken from the negotiation (Dial, Reconnect),
// which the caller starts, never from renewals: a server that grants ever
// shorter renewals, or fails them at once, cannot drive the session
// faster than one renewal per minRenewFloor.
func (s *Session) renewFloor() time.Duration {
	s.mu.Lock()
	life := s.lifetime
	s.mu.Unlock()
	lower := minRenewFloor
	if ttl := s.o.connect.ContractTTL; ttl > 0 {
		life = min(life, ttl)
		lower = min(lower, ttl/4)
	}
	return min(maxRenewFloor, max(lower, life/4))
}
