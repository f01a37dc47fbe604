package ws

import (
	"strconv"
	"unsafe"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/predecoded"
)

// decodeMessageFast decodes the envelope v, text CheckJSON accepted, as
// encoding/json would decode it into a pigeon.Message; ok is false when it
// cannot say so for sure.
func decodeMessageFast(v []byte, in *interner) (*pigeon.Message, bool) {
	w := walker{b: v, in: in}
	m, end := w.message(0, 0)
	return m, end >= 0 && jsontext.SpaceEnd(v, end) == len(v)
}

// The envelope's members, as pigeon.Message tags them, in the order
// AppendJSON writes them.
const (
	mSpecVersion = iota
	mID
	mType
	mSource
	mSubject
	mTime
	mIntent
	mIdempotencyKey
	mClassification
	mRegion
	mData
	mReplyTo
	mCorrelationID
	mReason
	mSignature
	mSequence
	mContractID
	mSubjectID
	mSchemaID
	mAcceptedAt
	mHops
)

var messageNames = names{
	mSpecVersion: "specversion", mID: "id", mType: "type", mSource: "source", mSubject: "subject", mTime: "time",
	mIntent: "intent", mIdempotencyKey: "idempotencyKey", mClassification: "classification", mRegion: "region",
	mData: "data", mReplyTo: "replyTo", mCorrelationID: "correlationId", mReason: "reason", mSignature: "signature",
	mSequence: "sequence", mContractID: "contractId", mSubjectID: "subjectId", mSchemaID: "schemaId", mAcceptedAt: "acceptedAt",
	mHops: "hops",
}

// sharedFields are the envelope's strings that repeat from message to
// message, read through the interner.
const sharedFields = 1<<mSpecVersion | 1<<mType | 1<<mSource | 1<<mSubject | 1<<mIntent | 1<<mClassification |
	1<<mRegion | 1<<mContractID | 1<<mSubjectID | 1<<mSchemaID

// span is where the text of a plain string member k lies in a walker's b.
type span struct{ k, from, to int }

// message decodes the envelope at b[i], nested in depth objects and arrays
// of the frame.
func (w *walker) message(i, depth int) (*pigeon.Message, int) {
	if i >= len(w.b) || w.b[i] != '{' {
		return nil, -1
	}
	m := new(pigeon.Message)
	return m, w.messageInto(m, i, depth)
}

// messageInto decodes the envelope at b[i] (an object) into m, zero, as
// message does.
//
// Its data and the plain strings it does not intern (id, time,
// idempotencyKey, acceptedAt, …) are copied out of b into one buffer, of
// this message alone, so that a message kept pins no more than its own
// bytes and never b: data first, its capacity its length, so that a
// handler changing or growing it never reaches the strings; then the
// strings, each a string over its bytes, which are never written again.
func (w *walker) messageInto(m *pigeon.Message, i, depth int) int {
	var (
		spans [mAcceptedAt + 1]span // each member at most once: object gives up on a second
		ns, n int
		data  span             // k unused; from == to: none
		pre   *predecoded.Data // w.data: the data decoded
	)
	strs := [...]*string{
		mSpecVersion: &m.SpecVersion, mID: &m.ID, mType: &m.Type, mSource: &m.Source, mSubject: &m.Subject, mTime: &m.Time,
		mIntent: &m.Intent, mIdempotencyKey: &m.IdempotencyKey, mClassification: &m.Classification, mRegion: &m.Region,
		mReplyTo: &m.ReplyTo, mCorrelationID: &m.CorrelationID, mReason: &m.Reason, mContractID: &m.ContractID,
		mSubjectID: &m.SubjectID, mSchemaID: &m.SchemaID, mAcceptedAt: &m.AcceptedAt,
	}
	end := w.object(i, messageNames, func(k, j int) int {
		switch k {
		case mData:
			if w.data {
				if e := jsontext.SkipValue(w.b, j); w.b[j] != 'n' {
					// The decoder reads b[j:e] whole, so e is where the
					// value ends when it succeeds; otherwise (too deep for
					// the engine, or not JSON) the value is checked below.
					var p *predecoded.Data
					if len(w.pre) > 0 {
						p = &w.pre[0] // a batch's chunk
					} else {
						p = new(predecoded.Data)
					}
					if p.Decode(w.b[j:e], pigeon.MaxJSONDepth) {
						pre = p
						if len(w.pre) > 0 {
							w.pre = w.pre[1:]
						}
						return e
					}
				}
			}
			var e int
			if w.trusted {
				e = jsontext.SkipValue(w.b, j)
			} else {
				e = w.value(j, depth+1)
			}
			if e < 0 || string(w.b[j:e]) == "null" {
				return -1 // encoding/json keeps null as its text
			}
			data = span{from: j, to: e}
			return e
		case mSequence:
			t, e := w.number(j)
			n, err := strconv.ParseUint(string(t), 10, 64)
			if err != nil {
				return -1
			}
			m.Sequence = n
			return e
		case mHops:
			t, e := w.number(j)
			n, err := strconv.ParseUint(string(t), 10, 32)
			if err != nil {
				return -1
			}
			m.Hops = uint32(n)
			return e
		case mSignature:
			sig, e := w.signature(j)
			m.Signature = sig
			return e
		}
		shared := sharedFields&(1<<k) != 0
		if shared && w.in != nil && w.b[j] == '"' {
			if s, e, ok := w.in.last(k, w.b, j); ok {
				*strs[k] = s
				return e
			}
		}
		if (!shared || w.in != nil) && w.b[j] == '"' {
			if e := plainEnd(w.b, j); e >= 0 {
				if shared {
					*strs[k] = w.in.field(k, w.b[j+1:e-1])
				} else if e-1 > j+1 {
					spans[ns] = span{k, j + 1, e - 1}
					ns++
					n += e - 1 - (j + 1)
				}
				return e
			}
		}
		return w.str(j, strs[k], shared)
	})
	if end >= 0 && pre != nil {
		m.Data = pre.Text[:len(pre.Text):len(pre.Text)]
		predecoded.Attach(m, pre)
	}
	dl := data.to - data.from
	if end < 0 || dl+n == 0 {
		return end
	}
	own := make([]byte, dl+n)
	copy(own, w.b[data.from:data.to])
	if dl > 0 {
		m.Data = own[:dl:dl]
	}
	at := dl
	for _, sp := range spans[:ns] {
		l := copy(own[at:], w.b[sp.from:sp.to])
		*strs[sp.k] = unsafe.String(&own[at], l)
		at += l
	}
	return end
}

var signatureNames = names{"kid", "alg", "sig", "v"}

// signature decodes a signature: its strings kid, alg and sig, and its
// form v, a number encoding/json reads into an int.
func (w *walker) signature(i int) (*pigeon.Signature, int) {
	sig := new(pigeon.Signature)
	strs := [...]*string{&sig.KID, &sig.Alg, &sig.Sig}
	end := w.object(i, signatureNames, func(k, j int) int {
		if k == len(strs) {
			if w.b[j] == 'n' {
				return -1 // null: encoding/json leaves the field; the slow path decides
			}
			n, e := w.integer(j, strconv.IntSize)
			sig.V = int(n)
			return e
		}
		return w.str(j, strs[k], false)
	})
	return sig, end
}
