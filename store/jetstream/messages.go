package jetstream

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// Headers of a stored message; the data is the body.
const (
	hdrID      = "Pigeon-Id"
	hdrTime    = "Pigeon-Time" // Unix nanoseconds, decimal
	hdrIdem    = "Pigeon-Idem"
	hdrIdemExp = "Pigeon-Idem-Expires"
	// hdrEncoded suffixes the header of an id or key that a header value
	// would not keep verbatim (see setText): its value is base64.
	hdrEncoded = "-B64"
)

// setText sets header name of msg to v. A NATS header value loses leading
// and trailing white space and cannot hold a line break, so a value of
// anything but printable ASCII without space at either end goes, base64
// (URL alphabet, unpadded), under name with hdrEncoded appended instead.
func setText(msg *nats.Msg, name, v string) {
	if verbatim(v) {
		msg.Header.Set(name, v)
		return
	}
	msg.Header.Set(name+hdrEncoded, base64.RawURLEncoding.EncodeToString([]byte(v)))
}

// verbatim reports whether a header value keeps v as it is.
func verbatim(v string) bool {
	if v == "" || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// text returns header name of raw as setText set it.
func text(raw *jetstream.RawStreamMsg, name string) (string, error) {
	enc := raw.Header.Get(name + hdrEncoded)
	if enc == "" {
		return raw.Header.Get(name), nil
	}
	v, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", &store.CorruptError{File: raw.Subject, Offset: int64(raw.Sequence), Reason: "header " + name + hdrEncoded + " does not decode: " + err.Error()}
	}
	return string(v), nil
}

// stream returns the message stream of subject; with create false it
// returns nil for a subject that never had a message.
func (s *Store) stream(ctx context.Context, subject string, create bool) (jetstream.Stream, error) {
	s.mu.Lock()
	st := s.streams[subject]
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	var err error
	if create {
		st, err = s.ensureStream(ctx, s.msgStream(subject), s.msgFilter(subject), s.subjectMeta(subject))
	} else {
		st, err = s.js.Stream(ctx, s.msgStream(subject))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil
		}
		err = s.fail(ctx, err)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.streams[subject] = st
	s.mu.Unlock()
	return st, nil
}

// Append implements store.MessageLog. The message id is indexed, and the
// idempotency key claimed, before the message is published, so a crash in
// between leaves a claim that a retry takes over once it is older than
// Options.Timeout. A message NATS could not carry (over the server's
// max_payload) is refused with ErrTooLarge before either is claimed, and
// a publish JetStream refuses (a stream limit) gives both back: neither
// holds an id or key for a message that was not stored.
func (s *Store) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if err := s.begin(ctx); err != nil {
		return store.Message{}, false, err
	}
	msg := s.newMsg(m)
	if err := s.fits(m, msg); err != nil {
		return m, false, err
	}
	var claimRev uint64
	if m.IdemKey != "" {
		orig, dup, rev, err := s.claimIdem(ctx, m)
		if err != nil || dup {
			return orig, dup, err
		}
		claimRev = rev
	}
	m, err := s.publish(ctx, m, msg)
	if err != nil && claimRev != 0 && (refused(err) || errors.Is(err, store.ErrExists)) {
		// Refused by JetStream, or the id is another message's: give the
		// key back, unless someone has taken it over since. After a
		// timeout the message may have been stored, so the claim stays: a
		// retry finds the message, or takes the claim over once it is too
		// old to be waited for.
		_ = s.idem.Delete(context.WithoutCancel(ctx), token(m.IdemKey), jetstream.LastRevision(claimRev))
	}
	return m, false, err
}

// ErrTooLarge is the error (wrapped) of an append whose message, body
// and headers, is larger than the NATS server's max_payload: it is
// refused before its id or idempotency key is claimed.
var ErrTooLarge = errors.New("jetstream: message larger than the NATS server's max_payload")

// newMsg is the NATS message of m, without its subject's stream: the
// body and m's headers.
func (s *Store) newMsg(m store.Message) *nats.Msg {
	msg := nats.NewMsg(s.msgSubject(m.Subject, m.ID))
	msg.Data = m.Body
	setText(msg, hdrID, m.ID)
	msg.Header.Set(hdrTime, strconv.FormatInt(m.Time.UnixNano(), 10))
	if m.IdemKey != "" {
		setText(msg, hdrIdem, m.IdemKey)
		msg.Header.Set(hdrIdemExp, strconv.FormatInt(m.IdemExpires.UnixNano(), 10))
	}
	return msg
}

// fits refuses msg, m's message, when the NATS server would: its body and
// headers, with those publish adds (the deduplication id and the expected
// stream), over max_payload. The count may be a few bytes short (the
// client adds nothing else today); a publish refused all the same gives
// its claims back (refused).
func (s *Store) fits(m store.Message, msg *nats.Msg) error {
	size := len("NATS/1.0\r\n\r\n") + len(msg.Data)
	for k, vs := range msg.Header {
		for _, v := range vs {
			size += len(k) + len(v) + 4
		}
	}
	size += len(jetstream.MsgIDHeader) + len(token(m.ID)) + 21 + 4
	size += len(jetstream.ExpectedStreamHeader) + len(s.msgStream(m.Subject)) + 4
	if limit := s.nc.MaxPayload(); limit > 0 && int64(size) > limit {
		return fmt.Errorf("%w: message %q of subject %q is %d bytes, the limit %d", ErrTooLarge, m.ID, m.Subject, size, limit)
	}
	return nil
}

// refused reports whether a publish failed without the message stored:
// the client would not send it (over max_payload), or the stream refused
// it (an API error, but for 503: a stream without quorum may or may not
// have kept it).
func refused(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) || errors.As(err, &api) && api.Code != 503
}

func (s *Store) publish(ctx context.Context, m store.Message, msg *nats.Msg) (store.Message, error) {
	st, err := s.stream(ctx, m.Subject, true)
	if err != nil {
		return m, err
	}
	idRev, err := s.claimID(ctx, m)
	if err != nil {
		return m, err
	}
	// The message id (as a token: a header value would not keep every
	// id apart) is also JetStream's deduplication id: a retry of a
	// publish whose acknowledgement was lost (within the stream's
	// duplicate window) is answered with the first one's sequence.
	name := st.CachedInfo().Config.Name
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(name), jetstream.WithMsgID(token(m.ID)))
	for err == nil && ack.Duplicate {
		// The stream took a message of this id within its duplicate
		// window, and this one was not stored. When that message has been
		// trimmed since, the id is free (claimID took it): store this one
		// under a deduplication id of its own, the trimmed message's
		// sequence in it, so a retry of this append is deduplicated too.
		// That one may be a duplicate again, of an earlier message of the
		// id trimmed too (an id re-used more than once in the window): the
		// sequences named grow, so the chain ends.
		gone, terr := s.trimmedSeq(ctx, st, ack.Sequence)
		if terr != nil || !gone {
			return m, cmp.Or(terr, idTaken(m.ID))
		}
		ack, err = s.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(name),
			jetstream.WithMsgID(token(m.ID)+"."+strconv.FormatUint(ack.Sequence, 10)))
	}
	if err != nil {
		if refused(err) {
			// Nothing stored: the id's entry, this append's, is given back
			// (up to its revision: one written since stays).
			_, _ = s.purgeUpTo(context.WithoutCancel(ctx), s.bucketName("ids"), token(m.ID), idRev)
		}
		return m, s.fail(ctx, err)
	}
	m.Seq = ack.Sequence
	return m, nil
}

// trimmedSeq reports whether the stream st no longer holds sequence seq.
// A direct get may be answered by a replica that does not hold seq yet
// (the stream's ack named it, so it is stored): a "not found" is read
// again from the stream's leader, which does not lag.
func (s *Store) trimmedSeq(ctx context.Context, st jetstream.Stream, seq uint64) (bool, error) {
	_, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) { return st.GetMsg(ctx, seq) })
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, s.fail(ctx, err)
	}
	js, err := s.nc.JetStream(nats.Context(ctx))
	if err != nil {
		return false, err
	}
	_, err = js.GetMsg(st.CachedInfo().Config.Name, seq, nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return true, nil
	}
	return false, s.fail(ctx, err)
}

// idTaken is the error of an append whose message id another message
// holds.
func idTaken(id string) error {
	return fmt.Errorf("jetstream: message id %q is another message's: %w", id, store.ErrExists)
}

// claimID indexes m.ID under m.Subject in the ids bucket, and returns the
// entry's revision, unless another
// message holds the id. The engine refuses an id it holds by a lookup
// under a lock of its own process only, so two nodes may both find an id
// free; the bucket's create, which the stream's leader decides once for
// all nodes, lets one of them have it. An entry whose message never came
// (its append died between the two writes) or is trimmed is taken over,
// compare-and-set, once its append cannot still be under way.
func (s *Store) claimID(ctx context.Context, m store.Message) (uint64, error) {
	key := token(m.ID)
	for {
		rev, err := s.ids.Create(ctx, key, []byte(m.Subject))
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return rev, s.fail(ctx, err)
		}
		held, err := leaderLast(ctx, s.nc, s.bucketName("ids"), key)
		if err != nil {
			return 0, s.fail(ctx, err)
		}
		if held != nil {
			if err := s.awaitIndexed(ctx, string(held.Data), m.ID, held.Time); !errors.Is(err, store.ErrNotFound) {
				return 0, cmp.Or(err, idTaken(m.ID))
			}
			rev, err = s.ids.Update(ctx, key, []byte(m.Subject), held.Sequence)
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
				return rev, s.fail(ctx, err)
			}
		}
		// Changed (or removed) since the read: read again.
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// awaitIndexed returns nil once message id of subject, indexed at at, is
// stored, and ErrNotFound once its append, which may still be under way,
// cannot be. The reads while it waits may be answered by a replica
// behind; the "not found" that frees the id is the stream leader's.
func (s *Store) awaitIndexed(ctx context.Context, subject, id string, at time.Time) error {
	deadline := at.Add(2 * s.opts.Timeout)
	for {
		_, err := s.find(ctx, subject, id)
		if errors.Is(err, store.ErrNotFound) && time.Now().After(deadline) {
			_, err = s.leaderFind(ctx, subject, id)
			return err
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// claim is the value of an idempotency key.
type claim struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Expires int64  `json:"expires"` // Unix nanoseconds
	At      int64  `json:"at"`      // wall clock of the claim, Unix nanoseconds
	// RawID and RawSubject hold ID and Subject when they are not UTF-8,
	// which a JSON string would not keep (it has U+FFFD for the bytes).
	RawID      []byte `json:"rawId,omitempty"`
	RawSubject []byte `json:"rawSubject,omitempty"`
}

// newClaim is the claim of m's key, made at the wall clock at.
func newClaim(m store.Message, at time.Time) claim {
	return claim{ID: m.ID, Subject: m.Subject, Expires: m.IdemExpires.UnixNano(), At: at.UnixNano(),
		RawID: rawText(m.ID), RawSubject: rawText(m.Subject)}
}

// message returns the id and subject of the message holding the claim.
func (c claim) message() (id, subject string) {
	return cmp.Or(string(c.RawID), c.ID), cmp.Or(string(c.RawSubject), c.Subject)
}

// rawText returns the bytes of v when JSON would not keep v as a string
// (it is not UTF-8), else nil.
func rawText(v string) []byte {
	if utf8.ValidString(v) {
		return nil
	}
	return []byte(v)
}

// idemMarkerTTL is how long the idempotency bucket keeps the marker of a
// claim its TTL removed.
const idemMarkerTTL = time.Minute

// claimGrace keeps a claim in the bucket a while after it expires, so a
// node whose clock runs behind still finds it.
const claimGrace = time.Minute

// claimTTL is the TTL of a claim that expires at exp: JetStream removes
// the key once the claim is of no use, grace after it expires (never
// less than a second, its smallest TTL).
func claimTTL(exp, now time.Time, grace time.Duration) time.Duration {
	return max(time.Second, exp.Sub(now)+grace).Round(time.Second)
}

// claimIdem claims m's idempotency key, or finds the message holding it.
// A key's claim is created with a TTL (claimTTL), so the bucket holds
// only the keys still in their idempotency window (and a minute more).
func (s *Store) claimIdem(ctx context.Context, m store.Message) (orig store.Message, dup bool, rev uint64, err error) {
	key := token(m.IdemKey)
	val, _ := json.Marshal(newClaim(m, time.Now()))
	// The first read of the claim is a direct get, which a replica behind
	// may answer; every later one (after a create or delete the leader
	// refused, the claim not being as read, or after taking it back) is
	// the leader's, so a replica behind cannot keep the loop going.
	for leader := false; ; leader = true {
		held, rev, err := s.readClaim(ctx, key, leader)
		if err == nil && held == nil {
			rev, err := s.idem.Create(ctx, key, val, jetstream.KeyTTL(claimTTL(m.IdemExpires, time.Now(), s.claimGrace)))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return store.Message{}, false, rev, s.fail(ctx, err)
		}
		if err != nil {
			return store.Message{}, false, 0, s.fail(ctx, err)
		}
		var c claim
		if err := json.Unmarshal(held, &c); err != nil {
			return store.Message{}, false, 0, &store.CorruptError{File: s.bucketName("idem"), Reason: "claim does not decode: " + err.Error()}
		}
		if m.Time.Before(time.Unix(0, c.Expires)) {
			orig, err := s.awaitClaimed(ctx, c, m.IdemKey)
			if err == nil {
				return orig, true, 0, nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return store.Message{}, false, 0, err
			}
			// A claim whose message never came: its holder died.
		}
		// The claim has expired (or its message never came): take it
		// back and claim the key afresh, with a TTL of its own.
		err = s.idem.Delete(ctx, key, jetstream.LastRevision(rev))
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return store.Message{}, false, 0, s.fail(ctx, err)
		}
	}
}

// readClaim reads the claim of key (nil when there is none) and its
// revision: with a direct get, or from the idem bucket's leader.
func (s *Store) readClaim(ctx context.Context, key string, leader bool) ([]byte, uint64, error) {
	if leader {
		m, err := leaderLast(ctx, s.nc, s.bucketName("idem"), key)
		if m == nil || err != nil {
			return nil, 0, err
		}
		return m.Data, m.Sequence, nil
	}
	e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.idem.Get(ctx, key) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

// awaitClaimed returns the message of claim c of idempotency key key,
// waiting while its append may still be under way; ErrNotFound once it
// cannot be. The message now stored under the claim's id answers only if
// it holds key: a trimmed message's id is free again, and a message of
// another key (or none) stored under it since is not the claim's. The
// reads while it waits may be answered by a replica behind; the "not
// found" that frees the key is the leaders' (of the message's stream and
// of the idem bucket, which holds the kept copies).
func (s *Store) awaitClaimed(ctx context.Context, c claim, key string) (store.Message, error) {
	deadline := time.Unix(0, c.At).Add(2 * s.opts.Timeout)
	id, subject := c.message()
	for first := true; ; first = false {
		m, err := s.claimedMessage(ctx, id, subject, key, first, false)
		if errors.Is(err, store.ErrNotFound) && time.Now().After(deadline) {
			return s.claimedMessage(ctx, id, subject, key, true, true)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return store.Message{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// claimedMessage reads message id of subject if it holds idempotency key
// key, then, withKept, its kept copy (a message trimmed while the key was
// live); from the leaders with leader, never from a replica behind.
func (s *Store) claimedMessage(ctx context.Context, id, subject, key string, withKept, leader bool) (store.Message, error) {
	find := s.find
	if leader {
		find = s.leaderFind
	}
	m, err := find(ctx, subject, id)
	if err == nil && m.IdemKey != key {
		m, err = store.Message{}, store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) && withKept {
		if k, kerr := s.keptFrom(ctx, id, key, leader); !errors.Is(kerr, store.ErrNotFound) {
			return k, kerr
		}
	}
	return m, err
}

// Read implements store.MessageLog.
func (s *Store) Read(ctx context.Context, subject string, from uint64, limit int) ([]store.Message, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	st, err := s.stream(ctx, subject, false)
	if st == nil || err != nil {
		return nil, err
	}
	var out []store.Message
	filter := st.CachedInfo().Config.Subjects[0]
	for seq := max(from, 1); limit <= 0 || len(out) < limit; {
		raw, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
			return st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, s.fail(ctx, err)
		}
		m, err := decodeMessage(subject, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		seq = raw.Sequence + 1
	}
	return out, nil
}

// Lookup implements store.MessageLog.
func (s *Store) Lookup(ctx context.Context, id string) (store.Message, error) {
	return s.lookup(ctx, id, true)
}

// LookupHint is Lookup without the leaders' confirmation of a not-found
// (store.HintLookup): a replica behind may answer ErrNotFound for a
// message it has not got yet. The broker asks it before a publish under a
// client's id, whose append claims the id at the leader anyway.
func (s *Store) LookupHint(ctx context.Context, id string) (store.Message, error) {
	return s.lookup(ctx, id, false)
}

// lookup reads message id; confirm reads a not-found again from the
// leaders.
func (s *Store) lookup(ctx context.Context, id string, confirm bool) (store.Message, error) {
	if err := s.begin(ctx); err != nil {
		return store.Message{}, err
	}
	e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.ids.Get(ctx, token(id)) })
	if err == nil {
		m, err := s.find(ctx, string(e.Value()), id)
		if !errors.Is(err, store.ErrNotFound) {
			return m, err
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return store.Message{}, s.fail(ctx, err)
	}
	if !confirm {
		return store.Message{}, store.ErrNotFound
	}
	// Not found, by a replica that may be behind: the engine lets a reply
	// take a client's id that Lookup does not find, so "not found" is the
	// leaders' (of the ids bucket and of the message's stream).
	held, err := leaderLast(ctx, s.nc, s.bucketName("ids"), token(id))
	if err != nil {
		return store.Message{}, s.fail(ctx, err)
	}
	if held == nil {
		return store.Message{}, store.ErrNotFound
	}
	return s.leaderFind(ctx, string(held.Data), id)
}

// find reads message id of subject.
func (s *Store) find(ctx context.Context, subject, id string) (store.Message, error) {
	st, err := s.stream(ctx, subject, false)
	if err != nil {
		return store.Message{}, err
	}
	if st == nil {
		return store.Message{}, store.ErrNotFound
	}
	raw, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
		return st.GetLastMsgForSubject(ctx, s.msgSubject(subject, id))
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return store.Message{}, store.ErrNotFound
	}
	if err != nil {
		return store.Message{}, s.fail(ctx, err)
	}
	return decodeMessage(subject, raw)
}

// leaderFind is find, read from the stream's leader (STREAM.MSG.GET, not
// a direct get), so its "not found" is not a replica's that is behind.
func (s *Store) leaderFind(ctx context.Context, subject, id string) (store.Message, error) {
	js, err := s.nc.JetStream(nats.Context(ctx))
	if err != nil {
		return store.Message{}, err
	}
	raw, err := js.GetLastMsg(s.msgStream(subject), s.msgSubject(subject, id), nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) || errors.Is(err, nats.ErrStreamNotFound) {
		return store.Message{}, store.ErrNotFound
	}
	if err != nil {
		return store.Message{}, s.fail(ctx, err)
	}
	return decodeMessage(subject, (*jetstream.RawStreamMsg)(raw))
}

// Bounds implements store.MessageLog.
func (s *Store) Bounds(ctx context.Context, subject string) (first, last uint64, err error) {
	if err := s.begin(ctx); err != nil {
		return 0, 0, err
	}
	st, err := s.stream(ctx, subject, false)
	if st == nil || err != nil {
		return 0, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, s.fail(ctx, err)
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}

// ListMessageSubjects implements store.MessageSubjectLister: one listing
// of the store's message streams (a page of stream infos per request, 256
// streams a page), keeping those that hold a message. The subject is the
// hex in the stream's name.
func (s *Store) ListMessageSubjects(ctx context.Context) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	pfx := s.opts.Prefix + "_M_"
	l := s.js.ListStreams(ctx, jetstream.WithStreamListSubject(s.pfx+".m.>"))
	var out []string
	for info := range l.Info() {
		name, ok := strings.CutPrefix(info.Config.Name, pfx)
		if !ok || info.State.Msgs == 0 {
			continue
		}
		if strings.HasPrefix(name, "h") {
			// Named by its subject's hash (subjectToken).
			if name = info.Config.Metadata[metaSubject]; name == "" {
				continue
			}
		}
		subject, err := hex.DecodeString(name)
		if err != nil {
			continue // not a stream of the store's
		}
		out = append(out, string(subject))
	}
	if err := l.Err(); err != nil {
		return nil, s.fail(ctx, fmt.Errorf("jetstream: listing message streams: %w", err))
	}
	return out, nil
}

var _ store.MessageSubjectLister = (*Store)(nil)

func msgTime(raw *jetstream.RawStreamMsg) time.Time {
	ns, _ := strconv.ParseInt(raw.Header.Get(hdrTime), 10, 64)
	return time.Unix(0, ns).UTC()
}

func decodeMessage(subject string, raw *jetstream.RawStreamMsg) (store.Message, error) {
	m := store.Message{Subject: subject, Seq: raw.Sequence, Time: msgTime(raw), Body: raw.Data}
	id, err := text(raw, hdrID)
	if err != nil {
		return m, err
	}
	if m.ID = id; m.ID == "" {
		return m, &store.CorruptError{File: raw.Subject, Offset: int64(raw.Sequence), Reason: "message without an id"}
	}
	k, err := text(raw, hdrIdem)
	if err != nil {
		return m, err
	}
	if k != "" {
		ns, _ := strconv.ParseInt(raw.Header.Get(hdrIdemExp), 10, 64)
		m.IdemKey, m.IdemExpires = k, time.Unix(0, ns).UTC()
	}
	if len(m.Body) == 0 {
		m.Body = nil
	}
	return m, nil
}
