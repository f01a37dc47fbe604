package pigeon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"pigeon/internal/jsontext"
	"pigeon/internal/predecoded"
	"pigeon/store"
)

// Caller is who performs an operation: the authenticated principal, the
// session's region and the contract it presents.
type Caller struct {
	Principal  *Principal
	Region     string
	ContractID string
	// Hops is the Message.Hops of what the caller publishes: 0 for a
	// publisher from outside the programs (every transport's caller), one
	// more than the handled message's for a program's emit (package
	// programs). The broker writes it into the message it admits, in place
	// of whatever the message held, so a program's depth travels with its
	// message to every node, and no publisher can set its own.
	Hops uint32
}

// Publish statuses.
const (
	StatusAccepted  = "accepted"
	StatusDuplicate = "duplicate"
)

// Result is the answer to an accepted publish.
type Result struct {
	// Status is "accepted", or "duplicate" when the idempotency key was
	// seen within its window; Message is then the original.
	Status  string   `json:"status"`
	Message *Message `json:"message"`

	src *decoded // the accepted message as its subscribers get it, for AppendMessageJSON
}

// AppendMessageJSON appends the JSON encoding of the result's message to
// b, as Message.AppendJSON does. For a message its subscribers are sent,
// it appends the very bytes they receive, encoded once for the answer and
// every delivery; changes made to r.Message after the publish returned are
// not seen.
func (r *Result) AppendMessageJSON(b []byte) []byte {
	if r.src != nil {
		return append(b, r.src.json()...)
	}
	return r.Message.AppendJSON(b)
}

// AppendBriefJSON appends the encoding of the result's message as
// AppendMessageJSON does, without its "data" member when Status is
// StatusAccepted: the data of a message just accepted is byte for byte the
// data its publisher sent, without the spacing around it ({} when it sent
// none), so an answer to the publisher need not carry it back. A
// duplicate's message is the original, whose data may differ, and is
// appended whole.
func (r *Result) AppendBriefJSON(b []byte) []byte {
	start := len(b)
	b = r.AppendMessageJSON(b)
	if r.Status != StatusAccepted {
		return b
	}
	n := len(b)
	if b = cutData(b, start, r.Message.Data); len(b) != n {
		return b
	}
	// Sent with spacing around it, the data is encoded as the value
	// alone (prepare).
	return cutData(b, start, valueText(r.Message.Data))
}

// cutData removes the "data" member, whose value is data, from the
// message encoded at b[start:], and leaves b unchanged if the encoding
// does not hold exactly that. The first `,"data":` of an encoding is its
// data member: a quote inside an encoded string is always escaped, so a
// comma followed by a quote never occurs inside one.
func cutData(b []byte, start int, data []byte) []byte {
	const name = `,"data":`
	if len(data) == 0 {
		data = emptyData
	}
	i := bytes.Index(b[start:], []byte(name))
	if i < 0 {
		return b
	}
	i += start
	end := i + len(name) + len(data)
	if end > len(b) || !bytes.Equal(b[i+len(name):end], data) {
		return b
	}
	return append(b[:i], b[end:]...)
}

var emptyData = []byte("{}")

var admissionPool = sync.Pool{New: func() any { return new(Admission) }}

// free gives a, and the memory of its data in the flat form, back to
// their pools once its publish is answered. The flat form's Objects are
// gone then; so are its strings and numbers unless Data was built from
// them (tree), which whatever was handed Data may hold.
func (a *Admission) free() {
	if ar := a.arena; ar != nil {
		if a.lazy {
			ar.Reuse()
		} else {
			ar.ReuseObjects()
		}
		arenaPool.Put(ar)
	}
	*a = Admission{}
	admissionPool.Put(a)
}

// arenaPool holds the memory of data decoded in the flat form
// (decodeData), and of data the transports decoded so (predecoded).
var arenaPool = &predecoded.Arenas

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// putBody returns bp, whose bytes body holds (a stored envelope toStore
// made), to bodyPool once the store has them.
func putBody(bp *[]byte, body []byte) {
	*bp = body[:0]
	bodyPool.Put(bp)
}

// NewMessageID returns a fresh message id, as the broker draws one for a
// message published without: "msg_" and 20 base-36 characters. A client
// that must know a message's id before the broker answers (a request, to
// check that its reply answers it) draws one here. Safe for concurrent use.
func NewMessageID() string {
	var b [24]byte
	copy(b[:4], "msg_")
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	r := rand.Uint64()
	r2 := rand.Uint64()
	for i := 4; i < 24; i++ {
		if i == 14 {
			r = r2
		}
		b[i] = alphabet[r%36]
		r /= 36
	}
	return string(b[:])
}

// Publish admits m under the caller's contract through every gate and, when
// all allow, appends it. A refusal is returned as *Error with the decision;
// a quarantined message carries the quarantine id in its details. m is not
// modified.
func (e *Engine) Publish(ctx context.Context, c Caller, in *Message) (*Result, error) {
	if e.opts.Observer != nil && in != nil {
		defer e.took(StagePublish, in.Subject, time.Now())
	}
	return e.publish(ctx, c, in, in != nil && in.ID != "")
}

// publish is Publish; clientID says whether the publisher chose in.ID (an
// id the broker drew, as Request does, needs no check that it is free).
func (e *Engine) publish(ctx context.Context, c Caller, in *Message, clientID bool) (*Result, error) {
	return e.admit(ctx, c, in, clientID, "")
}

// admit judges in and, when the gates allow it, stores it, or routes it as
// the reply to the stored request its correlationId names on a
// request/reply subject. release is the quarantine record in is released
// from (ReleaseQuarantine), "" for a publish: a released message is never
// a reply, and a refusal keeps it in that record (Admission.release).
func (e *Engine) admit(ctx context.Context, c Caller, in *Message, clientID bool, release string) (*Result, error) {
	if !e.ops.enter() { // Shutdown waits for the answer (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	if in == nil {
		if err := e.admissible(ctx); err != nil {
			return nil, err
		}
		return nil, NewError(CodeEnvelopeInvalid, "message is required")
	}
	if err := e.admissible(ctx); err != nil {
		return nil, err
	}
	a := admissionPool.Get().(*Admission)
	defer a.free()
	e.prepare(a, c, in)
	a.release = release
	if s := a.subj; release == "" && s != nil && s.mode == ModeRequestReply && a.Message.CorrelationID != "" && e.mayReply(ctx, a) {
		if stored, req, ok := e.requestFor(ctx, s, a.Message.CorrelationID); ok {
			return e.reply(ctx, a, stored, req, clientID)
		}
	}
	if gate, v, ok := e.judge(ctx, e.gates, a); !ok {
		return nil, e.refuse(ctx, a, gate, v)
	}
	if clientID {
		return e.acceptClientID(ctx, a)
	}
	res, err := e.accept(ctx, a)
	if err == errIDTaken {
		return nil, e.idTaken(ctx, a)
	}
	return res, err
}

// mayReply reports whether a's message may be a reply, to be looked for
// among the stored requests of its subject: when its correlation id is
// within the envelope's bounds and a's contract grants receive on the
// subject, as a reply needs. Otherwise the message is judged as a publish
// whatever its correlation id names, so the store is not asked for an id
// of any length before a gate has looked at the message, and the answer
// does not tell a publisher that may not receive there which ids are
// stored requests (a reply's refusal against a publish's acceptance).
func (e *Engine) mayReply(ctx context.Context, a *Admission) bool {
	if len(a.Message.CorrelationID) > MaxEnvelopeField || a.Principal == nil {
		return false
	}
	_, code, _ := e.checkContractAt(ctx, a.contractID, a.Principal, a.subj, OpReceive, a.Now)
	return code == CodeOK
}

// errIDTaken is accepted's error when the store refused the append
// because another message holds its id: another node of a cluster
// appended one between the check that the id is free and the append (the
// id lock spans this process; the store's claim spans the cluster). The
// caller answers, as the check would have.
var errIDTaken = errors.New("pigeon: the message id is another message's")

// idTaken refuses a's message with MESSAGE_ID_TAKEN.
func (e *Engine) idTaken(ctx context.Context, a *Admission) error {
	return e.refuse(ctx, a, GateDuplicate, Deny(CodeMessageIDTaken, "the message id is taken"))
}

// idLocks serialize the publishes of one client-chosen id, so that the
// check that the id is free and the append are one step.
type idLocks [64]sync.Mutex

func (l *idLocks) of(id string) *sync.Mutex { return &l[maphash.String(idSeed, id)%uint64(len(l))] }

var idSeed = maphash.MakeSeed()

// lookupHint looks id up through the store's LookupHint where it has one
// (store.HintLookup), through Lookup otherwise.
func (e *Engine) lookupHint(ctx context.Context, id string) (store.Message, error) {
	if h, ok := e.store.(store.HintLookup); ok {
		return h.LookupHint(ctx, id)
	}
	return e.store.Lookup(ctx, id)
}

// acceptClientID accepts a message whose id the publisher chose: an id the
// broker holds already is refused with MESSAGE_ID_TAKEN, unless the held
// message is this publisher's own under the same subject and idempotency
// key, when the publish is a duplicate of it. Ids the broker draws are
// random (over 100 bits) and skip the check.
func (e *Engine) acceptClientID(ctx context.Context, a *Admission) (*Result, error) {
	m, s := a.Message, a.subj
	mu := e.idLocks.of(m.ID)
	mu.Lock()
	defer mu.Unlock()
	// A clustered store may answer from a replica behind: the append
	// claims the id with authority, and a taken id is looked up again.
	held, err := e.lookupHint(ctx, m.ID)
	if errors.Is(err, store.ErrNotFound) {
		res, aerr := e.accept(ctx, a)
		if aerr != errIDTaken {
			return res, aerr
		}
		// Taken meanwhile on another node: answer as the lookup would
		// have, a duplicate when it is this publisher's own retry.
		if held, err = e.store.Lookup(ctx, m.ID); errors.Is(err, store.ErrNotFound) {
			return nil, NewError(CodeStoreUnavailable, "the message id is being taken on another node; retry")
		}
	}
	if err != nil {
		return nil, storeError(err)
	}
	if a.idemKey != "" && held.Subject == s.name {
		if orig, err := decodeStored(held); err == nil && orig.Source == a.Principal.ID {
			data, _ := decodeValue(orig.Data)
			if s.idempotencyKey(orig, data) == a.idemKey {
				return e.duplicate(ctx, a, orig), nil
			}
		}
	}
	return nil, e.idTaken(ctx, a)
}

// prepare fills a with what the gates see of in published by c: a copy of
// the envelope with defaults applied and Source set to the principal, the
// decoded data, and the subject.
func (e *Engine) prepare(a *Admission, c Caller, in *Message) {
	a.m = *in
	m := &a.m
	if in.Signature != nil {
		sig := *in.Signature // what the gates verify is what is stored, whatever the publisher does with its own
		m.Signature = &sig
	}
	m.Sequence, m.ContractID, m.SubjectID, m.SchemaID, m.AcceptedAt = 0, "", "", "", ""
	// The caller's, never the publisher's: the gates judge, the store
	// keeps and receivers get the depth the broker knows.
	m.Hops = c.Hops
	now := e.now()
	m.Source = c.Principal.ID
	if m.SpecVersion == "" {
		m.SpecVersion = SpecVersion
	}
	if m.ID == "" {
		m.ID = NewMessageID()
	}
	if m.Time == "" {
		a.nowText = formatTime(now)
		m.Time = a.nowText
	} else if _, ok := parseRFC3339(m.Time); !ok || len(m.Time) > MaxEnvelopeField {
		// RFC 3339 proper, as receivers in every language read it: Go's
		// parser alone takes a comma before the fraction, an offset of
		// 24 hours or of 60 minutes, and any number of digits.
		a.timeErr = true
	}
	if m.Classification == "" {
		m.Classification = DefaultClassification
	}
	if m.Region == "" {
		m.Region = c.Region
	}
	m.pre = nil // the admission's copy carries none
	subj := e.subject(m.Subject)
	var pre predecoded.Data
	if in.pre != nil {
		// Used once: a second publish of in, or of a copy of it, decodes
		// its data. A value in the flat form is a's from here on, its
		// arena given back by free, or now when it is not used.
		pre = in.pre.Take()
		in.pre = nil
		if !sameText(pre.Text, m.Data) {
			if pre.Arena != nil {
				predecoded.Free(pre.Arena)
			}
			pre = predecoded.Data{}
		}
	}
	if pre.Text != nil {
		// The frame decoder's copy, decoded as below: nothing else holds
		// it, and the publisher, the WebSocket server, only encodes its
		// result, which may therefore share it.
		a.sent, a.dataNames, a.dataExact = m.Data, pre.Names, pre.Exact
		if pre.Arena != nil {
			a.flat, a.lazy, a.arena = pre.Value, true, pre.Arena
		} else {
			a.Data = pre.Value
		}
		m.Data = valueText(m.Data) // as below
	} else if len(m.Data) == 0 {
		m.Data = json.RawMessage("{}")
		a.Data, a.dataExact = map[string]any{}, true
	} else if doc, err := e.decodeData(a, m.Data, subj); err != nil {
		a.dataCode, a.dataErr = dataError(err)
	} else {
		// From here on the data is the decoder's copy: the gates judge it,
		// the store keeps it and subscribers get it, whatever the
		// publisher does with its own bytes meanwhile.
		// What is judged, stored and sent is the value alone, without
		// the spacing around it, which an envelope read back from the
		// store (a delivery the recent cache misses) does not keep: every
		// receiver is then sent the same bytes.
		a.sent, m.Data, a.dataExact = m.Data, valueText(doc.Text), doc.Exact
		if doc.flat {
			a.flat, a.lazy = doc.Value, true
		} else {
			a.Data = doc.Value
		}
	}
	if a.dataErr == "" && !m.ValidText() {
		a.dataCode, a.dataErr = CodeInvalidUTF8, "an envelope field is not valid UTF-8"
	}
	a.Message, a.Principal, a.Region, a.Now = m, c.Principal, c.Region, now
	a.contractID, a.op = c.ContractID, OpPublish
	a.subj = subj
	if subj != nil {
		a.Policy = &subj.policy
		a.idemKey = subj.idempotencyKey(m, a.doc())
	}
}

// decodedData is message data decoded by decodeData: as a tree, or in
// the flat form (jsontext.DecodeFlat) when flat is set.
type decodedData struct {
	jsontext.Document
	flat bool
}

// decodeData decodes text, the data of a's message published on s,
// strictly, nested at most MaxJSONDepth levels, and gives the names of
// its top-level object to a.dataNames. The flat form costs a small
// object no hash table, and no allocation but the copy of text once its
// memory (a.arena, from arenaPool, which free gives back) is used again:
// the data is decoded so unless Data is sure to be needed (wantsTree),
// and Data is then built only if it is.
func (e *Engine) decodeData(a *Admission, text []byte, s *subject) (decodedData, error) {
	if e.wantsTree(s) {
		doc, err := jsontext.DecodeDocument(text, MaxJSONDepth, &a.dataNames)
		return decodedData{Document: doc}, err
	}
	a.arena = arenaPool.Get().(*jsontext.Arena)
	doc, err := jsontext.DecodeFlat(text, MaxJSONDepth, &a.dataNames, a.arena)
	return decodedData{Document: doc, flat: true}, err
}

// valueText is data, one JSON value, without the JSON whitespace
// (space, tab, line feed, carriage return) around it.
func valueText(data json.RawMessage) json.RawMessage {
	i, j := 0, len(data)
	for i < j && isJSONSpace(data[i]) {
		i++
	}
	for j > i && isJSONSpace(data[j-1]) {
		j--
	}
	return data[i:j:j]
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// sameText reports whether a and b are the same bytes in memory.
func sameText(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// decodeValue decodes message data strictly (jsontext.Decode), nested at
// most MaxJSONDepth levels.
func decodeValue(b []byte) (any, error) { return jsontext.Decode(b, MaxJSONDepth) }

// dataError is the envelope gate's code and reason for data that
// decodeValue refused.
func dataError(err error) (Code, string) {
	switch err {
	case jsontext.ErrDuplicateKey:
		return CodeDuplicateKey, "data has an object with two members of one name"
	case jsontext.ErrInvalidUTF8:
		return CodeInvalidUTF8, "data holds a string that is not valid UTF-8 (or a lone surrogate escape)"
	case jsontext.ErrTooDeep:
		return CodeEnvelopeInvalid, "data nests deeper than " + strconv.Itoa(MaxJSONDepth) + " levels"
	case jsontext.ErrNumberRange:
		return CodeEnvelopeInvalid, "data holds a number beyond the range of a 64-bit float (about ±1.8e308)"
	case jsontext.ErrNumberExponent:
		return CodeEnvelopeInvalid, "data holds a number written with an exponent of more than 3 digits (a 64-bit float's run from -324 to 308)"
	}
	return CodeEnvelopeInvalid, "data is not valid JSON"
}

// idempotencyKey is the message's key as the subject names it: the
// envelope's idempotencyKey, or a "data." path.
func (s *subject) idempotencyKey(m *Message, data any) string {
	if s.idemPath == nil {
		return m.IdempotencyKey
	}
	v, ok := s.idemPath.Lookup(data)
	if !ok {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if exactKey(x) {
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
	}
	return ""
}

// exactKey reports whether the decoded number x can be an idempotency
// key: an integer below 2^53 in magnitude, which every JSON text that
// decodes to it spells. Beyond, or with a fraction, distinct texts (what
// the store keeps and receivers get: 9007199254740992 and
// 9007199254740993, 0.1 and 0.10000000000000001) decode to one double,
// and their messages would take each other for duplicates.
func exactKey(x float64) bool {
	return x == math.Trunc(x) && math.Abs(x) < 1<<53
}

// accept appends an admitted message.
func (e *Engine) accept(ctx context.Context, a *Admission) (*Result, error) {
	sm, acc, bp := e.toStore(a)
	if err := e.tooLarge(ctx, a, len(sm.Body)); err != nil {
		putBody(bp, sm.Body)
		return nil, err
	}
	start := e.since()
	stored, dup, audited, err := e.appendAccepted(ctx, sm, &acc)
	e.committed(CommitMessages, 1, start)
	putBody(bp, sm.Body)
	return e.accepted(ctx, a, acc, nil, stored, dup, audited, err)
}

// tooLarge refuses, at GateRetention, a message whose stored envelope of
// size bytes alone is larger than its subject's retention.maxBytes: the
// bound could never keep it, and the trim its acceptance asks for would
// remove it at once. It returns nil for a message that fits.
func (e *Engine) tooLarge(ctx context.Context, a *Admission, size int) error {
	s := a.subj
	if s.fits(size) {
		return nil
	}
	return e.refuse(ctx, a, GateRetention, Deny(CodePayloadTooLarge,
		"the message's stored envelope is "+strconv.Itoa(size)+" bytes, over the "+strconv.Itoa(s.maxBytes)+" of the subject's retention.maxBytes"))
}

// fits reports whether a stored envelope of size bytes is within the
// subject's retention.maxBytes (0: no bound).
func (s *subject) fits(size int) bool { return s.maxBytes == 0 || size <= s.maxBytes }

// toStore is the stored form of an admitted message and the record of its
// acceptance. The body lives in bp, which the caller returns to bodyPool
// once the store has it.
func (e *Engine) toStore(a *Admission) (store.Message, store.AuditRecord, *[]byte) {
	m := a.Message
	s := a.subj
	m.ContractID, m.SubjectID, m.SchemaID = a.contractID, s.name, s.schemaID
	bp := bodyPool.Get().(*[]byte)
	body := m.AppendJSON((*bp)[:0])
	a.size = len(body)
	sm := store.Message{Subject: s.name, ID: m.ID, Time: a.Now, Body: body}
	if a.idemKey != "" {
		sm.IdemKey = s.name + "\x00" + a.Principal.ID + "\x00" + a.idemKey
		sm.IdemExpires = a.Now.Add(s.idemTTL)
	}
	acc := EventPublishAccepted.record(OutcomeAllow, CodeOK, store.AuditRecord{Time: a.Now, Subject: s.name, Principal: a.Principal.ID, ContractID: a.contractID, PolicyID: s.policyID, SchemaID: s.schemaID, MessageID: m.ID})
	return sm, acc, bp
}

// accepted answers an admitted message once the store answered its
// append: the failure audited, a duplicate, or the accepted message,
// recorded (unless the store kept acc with it), remembered for the
// fan-out and notified. body, when not nil, is the stored envelope: the
// encoding that transports send of the message (the answer, each
// delivery) is then made from it at once (acceptedJSON) rather than
// encoded again when first sent; PublishBatch gives it, whose caller is
// a transport that sends the answer. Publish does not: an in-process
// caller and in-process subscribers never need the encoding.
func (e *Engine) accepted(ctx context.Context, a *Admission, acc store.AuditRecord, body []byte, stored store.Message, dup, audited bool, err error) (*Result, error) {
	m := a.Message
	s := a.subj
	if errors.Is(err, store.ErrExists) {
		return nil, errIDTaken
	}
	if err != nil {
		err = storeError(err)
		e.audit(ctx, EventPublishFailed.record(OutcomeDeny, ErrorCode(err), store.AuditRecord{Subject: s.name, Principal: a.Principal.ID, ContractID: a.contractID, PolicyID: s.policyID, MessageID: m.ID}))
		return nil, err
	}
	if dup {
		orig, err := decodeStored(stored)
		if err != nil {
			return nil, err
		}
		return e.duplicate(ctx, a, orig), nil
	}
	e.askTrim(s, stored.Seq, a.size)
	f := e.fanoutOf(s.name)
	var res *acceptedResult
	var d *decoded
	if f != nil {
		both := &rememberedResult{res: acceptedResult{m: *m}}
		res, d = &both.res, &both.d
	} else {
		res = &acceptedResult{m: *m}
	}
	res.m.Sequence = stored.Seq
	if a.nowText != "" && stored.Time.Equal(a.Now) {
		res.m.AcceptedAt = a.nowText
	} else {
		res.m.AcceptedAt = formatTime(stored.Time)
	}
	res.r = Result{Status: StatusAccepted, Message: &res.m}
	judged := m.Data // nothing else holds it when a.sent is set
	if a.sent != nil {
		res.m.Data = a.sent // the publisher's own bytes: its result must not share the subscribers' copy
	} else {
		judged = nil
	}
	if !audited {
		acc.Seqs = strconv.FormatUint(stored.Seq, 10)
		e.auditAsync(acc)
	} else if e.opts.Observer != nil {
		acc.Seqs = strconv.FormatUint(stored.Seq, 10) // as the store's copy, which the log keeps
		e.observeRecord(&acc)
	}
	if f != nil {
		// Subscribers get what the gates judged: the stored envelope and
		// the data tree the gates read, decoded once. The copy shares
		// nothing with the publisher, who may reuse its buffers once
		// Publish returns. A subject nobody subscribes to keeps nothing.
		// Data the gates did not build (a.lazy) is decoded from the
		// judged text by the first subscriber that reads it.
		res.r.src = e.remember(d, f.recent(), stored.Seq, &res.m, judged, a.Data, !a.lazy, a.dataExact, a.Now)
		if body != nil {
			if enc := acceptedJSON(body, d.m); enc != nil {
				d.encOnce.Do(func() { d.enc = enc })
			}
		}
		f.appended(stored.Seq)
	}
	if e.opts.Cluster != nil {
		e.opts.Cluster.Notify(ClusterChange{Kind: ChangeAppended, Subject: s.name, Seq: stored.Seq})
	}
	return &res.r, nil
}

// acceptedJSON returns m.AppendJSON(nil) made from body, the encoding
// of m without its Sequence and AcceptedAt (the stored envelope of an
// accepted message), or nil when body does not end as that encoding
// would. AppendJSON writes "sequence" before "contractId", "subjectId"
// and "schemaId", and "acceptedAt" after them, before "hops": the
// members that body lacks go in there, and the rest is body's bytes.
func acceptedJSON(body []byte, m *Message) []byte {
	if m.Sequence == 0 || m.AcceptedAt == "" {
		return nil
	}
	var buf [256]byte
	tail := appendIDs(buf[:0], m)
	ids := len(tail)
	tail = appendHops(tail, m)
	if !bytes.HasSuffix(body, tail) {
		return nil
	}
	head := body[:len(body)-len(tail)]
	if !endsBeforeIDs(head, m) {
		return nil
	}
	b := make([]byte, 0, len(body)+len(`,"sequence":`)+20+len(`,"acceptedAt":""`)+len(m.AcceptedAt))
	b = append(b, head...)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendUint(b, m.Sequence, 10)
	b = append(b, tail[:ids]...)
	b = appendField(b, "acceptedAt", m.AcceptedAt)
	return append(b, tail[ids:]...)
}

// endsBeforeIDs reports whether head, a stored envelope up to its ids,
// ends with the member m's encoding writes last before them (its
// signature, reason, correlationId, replyTo or data): a stored envelope
// with an id that m lacks ends with that id instead, and is not m's. The
// member's quotes are the envelope's own (inside a string every quote is
// escaped, and data is one JSON value), so it is the envelope's member
// and not text that reads as one.
func endsBeforeIDs(head []byte, m *Message) bool {
	var buf [128]byte
	scratch, last := buf[:0], []byte(nil)
	switch {
	case m.Signature != nil:
		last = appendSignature(scratch, m.Signature)
	case m.Reason != "":
		last = appendField(scratch, "reason", m.Reason)
	case m.CorrelationID != "":
		last = appendField(scratch, "correlationId", m.CorrelationID)
	case m.ReplyTo != "":
		last = appendField(scratch, "replyTo", m.ReplyTo)
	default:
		data := []byte(m.Data)
		if len(data) == 0 {
			data = emptyData
		}
		if !bytes.HasSuffix(head, data) {
			return false
		}
		return bytes.HasSuffix(head[:len(head)-len(data)], []byte(`,"data":`))
	}
	return bytes.HasSuffix(head, last)
}

// duplicate answers a publish that repeats orig. The original comes back
// whole only to the credential that published it (holds): idempotency
// keys are scoped by principal, and another credential of the account (a
// grant token that may publish on the subject but not receive from it)
// learns that its key was used and the original's id and sequence, not
// the original's data.
func (e *Engine) duplicate(ctx context.Context, a *Admission, orig *Message) *Result {
	s := a.subj
	e.audit(ctx, EventPublishDuplicate.record(OutcomeAllow, CodeOK, store.AuditRecord{Time: a.Now, Gate: GateDuplicate, Subject: s.name, Principal: a.Principal.ID, ContractID: a.contractID, PolicyID: s.policyID, SchemaID: s.schemaID, MessageID: orig.ID, Seqs: seqText(orig.Sequence), Ref: a.Message.ID}))
	if !e.holds(ctx, a.Principal, a.contractID, orig.ContractID) {
		orig = &Message{SpecVersion: orig.SpecVersion, ID: orig.ID, Source: orig.Source, Subject: orig.Subject,
			IdempotencyKey: orig.IdempotencyKey, Sequence: orig.Sequence, ContractID: orig.ContractID,
			SubjectID: orig.SubjectID, AcceptedAt: orig.AcceptedAt}
	}
	return &Result{Status: StatusDuplicate, Message: orig}
}

// holds reports whether p, acting under contract current, holds contract
// id: the same contract, or one negotiated with p's credential
// (contract.heldBy). A contract that is gone, or cannot be read, is held
// by no one.
func (e *Engine) holds(ctx context.Context, p *Principal, current, id string) bool {
	if id == current {
		return true
	}
	c, err := e.lookupContract(ctx, id)
	return err == nil && c != nil && c.heldBy(p)
}

// acceptedResult is an accepted publish's Result with its message, in one
// allocation.
type acceptedResult struct {
	r Result
	m Message
}

// rememberedResult is an acceptedResult and the copy of its message the
// fan-out shares (remember), in one allocation: the Result points at the
// copy (Result.src) and so keeps it alive anyway.
type rememberedResult struct {
	res acceptedResult
	d   decoded
}

// decodeStored rebuilds an accepted message from its stored form.
func decodeStored(sm store.Message) (*Message, error) {
	var m Message
	if err := unmarshalEnvelope(sm.Body, &m); err != nil {
		return nil, WrapError(CodeStoreCorrupt, err, "stored message %s does not decode", sm.ID)
	}
	m.Sequence = sm.Seq
	m.AcceptedAt = formatTime(sm.Time)
	return &m, nil
}

// refuse records a refusal: audit, quarantine where policy says so, and the
// typed error.
func (e *Engine) refuse(ctx context.Context, a *Admission, gate string, v Verdict) error {
	a.tree() // a quarantined copy is made from Data
	// The subject and id are the publisher's: a card number there is
	// named "[REDACTED]" in the record and the error, as in a
	// quarantined copy.
	d := &Decision{Outcome: v.Outcome, Code: v.Code, Gate: gate, Reason: v.Reason, Subject: noPAN(a.Message.Subject),
		ContractID: a.contractID, Principal: a.Principal.ID, MessageID: noPAN(a.Message.ID), Time: a.Now}
	if s := a.subj; s != nil {
		d.SubjectID, d.PolicyID, d.SchemaID = s.name, s.policyID, s.schemaID
		// An envelope refusal comes before the contract gate: it keeps no
		// copy, whatever its code, for a publisher the subject may not
		// even allow.
		if d.Outcome == OutcomeDeny && gate != GateEnvelope && s.quarantinable(v.Code) {
			if e.mayQuarantine(a.Principal.ID, a.Now) {
				d.Outcome = OutcomeQuarantine
			} else {
				e.note(NoteQuarantineSkipped, s.name)
			}
		}
	} else if d.Outcome == OutcomeQuarantine {
		d.Outcome = OutcomeDeny
	}
	e.audit(ctx, EventPublishDenied.record(d.Outcome, d.Code, store.AuditRecord{Time: a.Now, Gate: gate, Subject: d.Subject, Principal: d.Principal, ContractID: d.ContractID, PolicyID: d.PolicyID, SchemaID: d.SchemaID, MessageID: d.MessageID}))
	if d.Outcome == OutcomeQuarantine {
		id, err := e.quarantine(ctx, a, d)
		if err != nil {
			e.opts.Logger.Error("quarantine failed", "subject", d.Subject, "code", d.Code, "err", err)
			d.Outcome = OutcomeDeny
		} else {
			d.QuarantineID = id
		}
	}
	return d.err()
}

// mayQuarantine takes a token of principal's Options.QuarantineRate at
// now, and tells whether its refused message may be kept.
func (e *Engine) mayQuarantine(principal string, now time.Time) bool {
	rp := e.opts.QuarantineRate
	return rp.PerSecond <= 0 || e.limiter.take(rateKey{kind: limitQuarantine, principal: principal}, rp, now)
}
