package natsbridge

import (
	"context"
	"errors"

	"pigeon"
)

// verdict is what an error means for the message, the session and the
// bridge.
type verdict int

const (
	// refused: a gate refused this message (or would have: the bridge
	// refuses ambiguous JSON before the broker). A policy decision does
	// not change on retry, so the message is terminated, counted and
	// logged with its code.
	refused verdict = iota
	// retry: a condition that may pass (rate limit, store trouble, a
	// timeout); the message is tried again later on the same session.
	retry
	// renew: the session is gone or its contract expired; the message is
	// tried again on a new session, which the bridge dials.
	renew
	// fatal: the bridge must stop (its contract or grant revoked, its
	// credential refused, a route the policy no longer permits). Its
	// messages are left for a later bridge, never terminated.
	fatal
)

// judge classifies err, which is not nil.
func judge(err error) verdict {
	switch {
	case errors.Is(err, ErrNATSClosed):
		return fatal
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return retry
	}
	var pe *pigeon.Error
	if !errors.As(err, &pe) {
		return renew // a transport failure below the session
	}
	switch pe.Code {
	case pigeon.CodeRateLimited, pigeon.CodeStoreUnavailable, pigeon.CodeStoreNoQuorum, pigeon.CodeStoreFull,
		pigeon.CodeStoreCorrupt, pigeon.CodeAuditTampered, pigeon.CodeClusterUnconfirmed, pigeon.CodeRequestTimeout,
		pigeon.CodeIdentityUnavailable, pigeon.CodeInternal, pigeon.CodeTooManyContracts, pigeon.CodeTooManySubscriptions:
		return retry
	case pigeon.CodeShutdown, pigeon.CodeSessionClosed, pigeon.CodeContractExpired, pigeon.CodeContractStale,
		pigeon.CodeContractNotFound, pigeon.CodeContractRequired:
		return renew
	case pigeon.CodeContractRevoked, pigeon.CodeGrantRevoked, pigeon.CodeUnauthenticated, pigeon.CodeContractPrincipalMismatch,
		pigeon.CodeSubjectNotInContract, pigeon.CodeOperationNotInContract, pigeon.CodeSubjectNotFound,
		pigeon.CodeNoPermittedSubjects, pigeon.CodeForbidden:
		return fatal
	}
	return refused
}
