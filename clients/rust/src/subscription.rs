//! Subscriptions: push delivery to a handler or a stream, acks gathered
//! into frames, resumption after a reconnect.

use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::message::Message;
use crate::session::{Inner, Session};
use futures_util::Stream;
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

tokio::task_local! {
    /// The subscription (its address) whose handler runs in this task: an
    /// unsubscribe or close called from a handler must not wait for it.
    static HANDLER_OF: usize;
}

/// The most deliveries of an [`Ack::None`] subscription queued in the
/// client, waiting for a handler (or for the consumer of a stream
/// subscription). The server does not flow-control such a subscription
/// (nothing is answered, so the window holds nothing back): beyond this
/// bound, or beyond [`MAX_QUEUED_BYTES`] of their data, the client drops
/// deliveries, as at most once allows, rather than queue them without
/// limit. [`Subscription::dropped`] counts them, and `on_error` receives a
/// `DELIVERIES_DROPPED` error ([`ErrorKind::Dropped`]) at drop counts 1, 2,
/// 4, 8, … An acknowledged subscription is bounded by its window:
/// deliveries beyond it waiting in the client (a server that ignores the
/// window) are left unanswered, for the server's ack wait to give back.
pub const MAX_QUEUED: usize = 4096;

/// The most data, in bytes, of the deliveries of an [`Ack::None`]
/// subscription queued in the client (64 MiB): a delivery that would take
/// the queued data past it is dropped as one beyond [`MAX_QUEUED`] is, so
/// that a stuck handler cannot make the client hold gigabytes of large
/// messages. One delivery of any size is queued when none is. A delivery's
/// size is the length of its data as JSON text: the client keeps no frame
/// text, so it is the data serialized again (compact, into a counter: no
/// copy is made), which may differ by a few bytes from the text the server
/// sent (escapes, number forms); null data counts 0.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// The size of `data` counted against [`MAX_QUEUED_BYTES`].
fn data_size(data: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if data.is_null() {
        return 0; // none: a message without data decodes to null
    }
    let mut n = Count(0);
    let _ = serde_json::to_writer(&mut n, data); // a Value into a counter cannot fail
    n.0
}

/// What the queue holds: `n` deliveries (bounded by [`MAX_QUEUED`] for
/// [`Ack::None`]), with `bytes` of data ([`Ack::None`], bounded by
/// [`MAX_QUEUED_BYTES`]). [`Ack::Explicit`]: `live` of them are of the
/// connection `conn` (its address), bounded by the window; those of lost
/// connections are dropped as the next connection's come (see
/// [`SubShared::discard_stale`]).
#[derive(Default)]
struct Queued {
    n: usize,
    bytes: usize,
    conn: usize,
    live: usize,
}

/// A connection's identity for [`Queued::conn`].
fn conn_key(c: &Arc<Conn>) -> usize {
    Arc::as_ptr(c) as usize
}

/// Where a pub/sub subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// What is published from now on (the default).
    #[default]
    New,
    /// Everything retained.
    First,
    /// From this sequence on.
    Sequence(u64),
}

/// How the deliveries of a subscription are answered (the `ack` field of
/// `subscribe`, docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ack {
    /// Every delivery is acked or nacked (the default): a handler's
    /// failure is redelivered, and the window bounds the deliveries
    /// unanswered.
    #[default]
    Explicit,
    /// At most once, pub/sub subjects only: the server counts a delivery
    /// done once it sent it, so the client answers nothing (a handler's
    /// error or panic is not retried; [`Delivery::ack`] and `nack` send
    /// nothing) and nothing is redelivered. The window then holds nothing
    /// back: `max_in_flight` still bounds the handlers running at once,
    /// and the deliveries beyond wait queued in the client, at most
    /// [`MAX_QUEUED`] of them and [`MAX_QUEUED_BYTES`] of their data (for a
    /// stream subscription too): the client drops those beyond, counts
    /// them ([`Subscription::dropped`]) and reports them to `on_error` as
    /// `DELIVERIES_DROPPED` at drop counts 1, 2, 4, 8, … A resubscription
    /// after a reconnect starts after the last message received, else at
    /// the `from` of the latest `subscribed` answer (see [`Subscription`],
    /// "Resuming"), else at its original start. The
    /// server refuses it on a work-queue subject (`INVALID_ARGUMENT`).
    None,
}

/// Options of a subscription (see docs/protocol.md, "subscribe").
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// A content selector such as `/kind=chat/room=lobby`.
    pub selector: Option<String>,
    /// A CEL condition over `principal` and `message`.
    pub filter: Option<String>,
    /// The consumer group of a work-queue or request/reply subject;
    /// members of one group share the messages.
    pub group: Option<String>,
    /// How many handlers run at once (default 1).
    pub max_in_flight: u32,
    /// How many deliveries may be on the wire unanswered (default: 256,
    /// or `max_in_flight` when larger).
    pub window: Option<u32>,
    /// Where a pub/sub subscription starts.
    pub start: Option<Start>,
    /// How deliveries are answered: [`Ack::Explicit`] (the default) or
    /// [`Ack::None`] (at most once, pub/sub only).
    pub ack: Ack,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions { selector: None, filter: None, group: None, max_in_flight: 1, window: None, start: None, ack: Ack::Explicit }
    }
}

impl SubscribeOptions {
    pub fn selector(mut self, s: impl Into<String>) -> Self {
        self.selector = Some(s.into());
        self
    }
    pub fn filter(mut self, f: impl Into<String>) -> Self {
        self.filter = Some(f.into());
        self
    }
    pub fn group(mut self, g: impl Into<String>) -> Self {
        self.group = Some(g.into());
        self
    }
    pub fn max_in_flight(mut self, n: u32) -> Self {
        self.max_in_flight = n.max(1);
        self
    }
    pub fn window(mut self, n: u32) -> Self {
        self.window = Some(n.max(1));
        self
    }
    pub fn start(mut self, s: Start) -> Self {
        self.start = Some(s);
        self
    }
    /// `.ack(Ack::None)` makes the subscription at most once (see [`Ack`]).
    pub fn ack(mut self, a: Ack) -> Self {
        self.ack = a;
        self
    }
}

/// A handler's failure: the delivery is nacked, and redelivered after
/// `retry_after` when set (else after the subject's backoff). Any
/// `std::error::Error` converts into it, so `?` works in handlers.
#[derive(Debug, Clone)]
pub struct HandlerError {
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl HandlerError {
    pub fn new(message: impl Into<String>) -> HandlerError {
        HandlerError { message: message.into(), retry_after: None }
    }
    /// Nack and ask for redelivery after `delay`.
    pub fn retry_after(delay: Duration, message: impl Into<String>) -> HandlerError {
        HandlerError { message: message.into(), retry_after: Some(delay) }
    }
}

impl<E: std::error::Error> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::new(e.to_string())
    }
}

pub(crate) type Handler =
    Arc<dyn Fn(Delivery) -> Pin<Box<dyn Future<Output = std::result::Result<(), HandlerError>> + Send>> + Send + Sync>;

pub(crate) enum SubMode {
    Handler(Handler),
    Stream(Mutex<StreamBuf>),
}

/// The deliveries of a stream subscription waiting for its reader.
#[derive(Default)]
pub(crate) struct StreamBuf {
    items: VecDeque<Delivery>,
    waker: Option<Waker>,
    /// Nothing more is handed out: the subscription stopped or ended.
    ended: bool,
    /// The error that ended it, yielded once after `ended`.
    err: Option<Error>,
}

/// One message handed to a subscription.
#[derive(Clone)]
pub struct Delivery {
    pub message: Message,
    /// Counts deliveries of this message to this subscription (pub/sub) or
    /// group (work queue), from 1, to [`MAX_ATTEMPT`](crate::MAX_ATTEMPT)
    /// (2^31-1), as a receive answer's attempts are read: a delivery whose
    /// attempt is anything else (absent, null, 0, a negative, no integer,
    /// one beyond 2^31-1) is a bad frame, reported `BAD_FRAME` and never
    /// handed out.
    pub attempt: u32,
    handle: AckHandle,
    /// A delivery of an acknowledged stream subscription handed to its
    /// reader: counted until answered, nacked when dropped unanswered.
    held: Option<Arc<Held>>,
    /// [`Ack::None`]: the size of its data, counted while it is queued.
    size: usize,
    /// A delivery of an acknowledged handler subscription: set once the
    /// handler answers it itself ([`ack`](Delivery::ack) or
    /// [`nack`](Delivery::nack)), so that its result is not sent as a
    /// second answer (an ack after its nack would settle the redelivery).
    settled: Option<Arc<AtomicBool>>,
}

/// A stream delivery in its reader's hands, shared by the clones of the
/// [`Delivery`]. The subscription counts it until it is answered, so that
/// an unsubscribe or close lets its answer reach the server first; when the
/// last clone is dropped unanswered, it is nacked (the reader gave it up).
struct Held {
    handle: AckHandle,
    id: String,
    seq: u64,
    answered: AtomicBool,
}

impl Held {
    /// The first answer takes the delivery off the count once it is sent
    /// (the [`Release`] dropped); a later one gets `None`.
    fn answer(&self) -> Option<Release> {
        (!self.answered.swap(true, Ordering::AcqRel)).then(|| Release(self.handle.sub.clone()))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(release) = self.answer() else { return };
        let h = self.handle.clone();
        if h.sub.is_ended() || h.conn.is_dead() {
            return; // nothing to answer on: the server has it back
        }
        let (id, seq) = (std::mem::take(&mut self.id), self.seq);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                nack(&h, &id, seq, None).await;
                drop(release);
            });
        }
    }
}

/// Takes a held stream delivery off its subscription's count when dropped.
struct Release(Arc<SubShared>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.held.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[derive(Clone)]
struct AckHandle {
    sub: Arc<SubShared>,
    conn: Arc<Conn>,
    sid: String,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery").field("message", &self.message).field("attempt", &self.attempt).finish()
    }
}

impl Delivery {
    /// The subject subscribed to.
    pub fn subject(&self) -> &str {
        &self.handle.sub.subject
    }

    /// Acknowledges the delivery (acks that gather meanwhile share a
    /// frame). `ACK_NOT_ALLOWED` when it was answered already or its ack
    /// wait passed; a transport error when its connection is gone (the
    /// server has it back). A handler need not call it (its result
    /// settles); one that answers its delivery itself (`ack` or `nack`)
    /// has its result dropped, not sent as a second answer.
    /// On an [`Ack::None`] subscription it sends nothing and returns `Ok`.
    ///
    /// A stream delivery dropped (its last clone) without `ack` or `nack`
    /// is nacked, as one its reader gave up on.
    pub async fn ack(&self) -> Result<()> {
        if self.handle.sub.opts.ack == Ack::None {
            return Ok(());
        }
        let release = self.held.as_ref().and_then(|h| h.answer());
        if let Some(s) = &self.settled {
            s.store(true, Ordering::Release);
        }
        let (tx, rx) = oneshot::channel();
        self.handle.sub.queue_ack(&self.handle, &self.message, Some(tx));
        drop(release); // queued: an unsubscribe sends it before its own frame
        rx.await.unwrap_or_else(|_| Err(Error::closed()))
    }

    /// Gives the delivery back for redelivery after `delay` (default: the
    /// subject's backoff). On an [`Ack::None`] subscription it sends
    /// nothing and returns `Ok`: nothing is redelivered.
    pub async fn nack(&self, delay: Option<Duration>) -> Result<()> {
        if self.handle.sub.opts.ack == Ack::None {
            return Ok(());
        }
        let _release = self.held.as_ref().and_then(|h| h.answer());
        if let Some(s) = &self.settled {
            s.store(true, Ordering::Release);
        }
        let mut f = answer_frame("nack", &self.handle.sid, &self.message.id, self.message.sequence);
        if let Some(d) = delay {
            f["delayMs"] = json!(crate::time::wire_ms(d));
        }
        self.handle.conn.call(obj(f), Duration::from_secs(30)).await.map(|_| ())
    }
}

/// The frame answering delivery `id` of subscription `sid` (op `ack` or
/// `nack`): it names the delivery's sequence as well as its id (0 names
/// none), so that a late answer never settles a newer message published
/// under the id once retention trimmed the one delivered (the server
/// refuses it).
fn answer_frame(op: &str, sid: &str, id: &str, seq: u64) -> Value {
    let mut f = json!({"op": op, "sub": sid, "messageId": id});
    if seq > 0 {
        f["sequence"] = json!(seq);
    }
    f
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

enum AckCmd {
    Ack { h: AckHandle, id: String, seq: u64, tx: Option<oneshot::Sender<Result<()>>> },
    Flush(oneshot::Sender<()>),
}

#[derive(Default)]
struct SubState {
    sid: Option<String>,
    conn: Option<Arc<Conn>>,
    /// The sequences received and not yet handled successfully (an
    /// acknowledged subscription): an ack queued on a live connection
    /// removes one (whatever the server answers), a nack keeps it. A
    /// pub/sub resubscription starts from the lowest. At most
    /// [`MAX_OUTSTANDING`] (see [`SubState::outstand`]).
    pending: BTreeSet<u64>,
    /// The highest sequence acked (at most once: received); a pub/sub
    /// resubscription starts after it when nothing is pending.
    last_acked: u64,
    /// The `from` of the latest subscribed answer (pub/sub: the first
    /// sequence the server subscription delivers); 0: not named. A
    /// resubscription starts there when nothing is pending or acked.
    from: u64,
    /// The sequence the subscribe on its way asked to start at; 0: none.
    asked: u64,
    stopping: bool,
    ended: bool,
    err: Option<Error>,
}

/// `seq` as a resume position, as in the Go client: 0 (none) for 2^64-1,
/// which no broker numbers (a hostile or broken server) and after which
/// there is no next sequence to resume at. A subscription that was handed
/// it resumes as if the message had not been numbered; without this, it
/// would resume at 2^64-1 again, past every message a broker will have,
/// and get nothing more.
pub(crate) fn resumable(seq: u64) -> u64 {
    if seq == u64::MAX {
        0
    } else {
        seq
    }
}

/// The most sequences an acknowledged subscription remembers to resume
/// from (see [`Subscription`], "Resuming"), as in the Go client: when the
/// set holds this many, the lowest quarter is forgotten before another is
/// added. Only failures the server stopped redelivering (exhausted) stay
/// that long, and those are in its quarantine or audit already; without
/// the bound, a handler that keeps failing on such a subject would grow the
/// set for as long as the client runs.
const MAX_OUTSTANDING: usize = 1 << 16;

impl SubState {
    /// Notes that `seq` was handed over; a full set forgets its lowest
    /// quarter first ([`MAX_OUTSTANDING`]).
    fn outstand(&mut self, seq: u64) {
        if self.pending.len() >= MAX_OUTSTANDING {
            if let Some(&keep) = self.pending.iter().nth(self.pending.len() / 4) {
                self.pending = self.pending.split_off(&keep);
            }
        }
        self.pending.insert(seq);
    }

    /// Where a pub/sub resubscription starts: the lowest pending sequence,
    /// else after the highest acked, else the `from` of the latest
    /// subscribed answer (0 when not named: the original start).
    fn resume_at(&self) -> u64 {
        match self.pending.first() {
            Some(&low) => low,
            // Never u64::MAX (see `resumable`); saturating all the same.
            None if self.last_acked > 0 => self.last_acked.saturating_add(1),
            None => self.from,
        }
    }

    /// Notes the `from` of a subscribed answer (0: not named, which keeps
    /// the last one: a work queue, an older server). One below the
    /// sequence the subscribe asked for means the subject was numbered
    /// anew (the broker lost its store): what this subscription acked
    /// counts for nothing on it, so the highest acked (at most once:
    /// received) is forgotten and the next resume continues in the new
    /// numbering.
    fn started(&mut self, from: u64) {
        let asked = std::mem::take(&mut self.asked);
        if from > 0 {
            self.from = from;
            if from < asked {
                self.last_acked = 0;
            }
        }
    }
}

pub(crate) struct SubShared {
    subject: String,
    opts: SubscribeOptions,
    mode: SubMode,
    session: Weak<Inner>,
    st: Mutex<SubState>,
    done_tx: watch::Sender<bool>,
    queue_tx: mpsc::UnboundedSender<Delivery>,
    ack_tx: mpsc::UnboundedSender<AckCmd>,
    sem: Arc<Semaphore>,
    /// The stream deliveries handed to the reader and not yet answered
    /// ([`Held`]).
    held: watch::Sender<usize>,
    /// [`Ack::None`]: the deliveries queued and not yet taken by a handler
    /// (or the stream's consumer), and the size of their data.
    queued: Mutex<Queued>,
    /// [`Ack::None`]: the deliveries dropped because the queue was full.
    dropped: AtomicU64,
    /// [`Ack::Explicit`]: the deliveries that came beyond the window.
    overflow: AtomicU64,
    /// The messages ([`RunKey`]) whose handler runs, each with the
    /// deliveries of it that came meanwhile (its ack wait passed, or a
    /// resumed subscription gave it again): parked until that run returns,
    /// then run in turn, so that one message's handler never runs twice at
    /// once. Parked deliveries count against the window until they run.
    running: Mutex<std::collections::HashMap<RunKey, VecDeque<Delivery>>>,
}

/// The message a delivery is of, for running its handler once at a time:
/// its id and sequence. A message id names one message at a time only: a
/// later message published under it once retention trimmed the first (a
/// higher sequence) is another, whose handler need not wait for the old
/// one's run (each answer names its own sequence, and the server settles
/// the two apart).
type RunKey = (String, u64);

fn run_key(m: &Message) -> RunKey {
    (m.id.clone(), m.sequence)
}

impl SubShared {
    pub(crate) fn new(subject: &str, opts: SubscribeOptions, mode: SubMode, session: Weak<Inner>) -> Arc<SubShared> {
        let (queue_tx, queue_rx) = mpsc::unbounded_channel();
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let s = Arc::new(SubShared {
            subject: subject.to_string(),
            sem: Arc::new(Semaphore::new(opts.max_in_flight.max(1) as usize)),
            opts,
            mode,
            session,
            st: Mutex::new(SubState::default()),
            done_tx: watch::channel(false).0,
            queue_tx,
            ack_tx,
            held: watch::channel(0).0,
            queued: Mutex::default(),
            dropped: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            running: Mutex::default(),
        });
        tokio::spawn(ack_loop(ack_rx));
        if let SubMode::Handler(h) = &s.mode {
            tokio::spawn(dispatch_loop(Arc::downgrade(&s), h.clone(), queue_rx));
        }
        s
    }

    fn frame(&self, start: Option<Start>) -> Map<String, Value> {
        let o = &self.opts;
        let mut f = json!({
            "op": "subscribe",
            "subject": self.subject,
            "maxInFlight": o.max_in_flight,
            "window": self.window(),
            "batch": true,
        });
        if let Some(s) = &o.selector {
            f["selector"] = json!(s);
        }
        if let Some(s) = &o.filter {
            f["filter"] = json!(s);
        }
        if let Some(s) = &o.group {
            f["group"] = json!(s);
        }
        if o.ack == Ack::None {
            f["ack"] = json!("none");
        }
        match start {
            Some(Start::New) | None => {}
            Some(Start::First) => f["start"] = json!("first"),
            Some(Start::Sequence(n)) => f["start"] = json!({"sequence": n}),
        }
        obj(f)
    }

    pub(crate) async fn subscribe_on(self: &Arc<Self>, conn: &Arc<Conn>, timeout: Duration) -> Result<()> {
        self.subscribe_with(conn, self.opts.start, timeout).await
    }

    async fn subscribe_with(self: &Arc<Self>, conn: &Arc<Conn>, start: Option<Start>, timeout: Duration) -> Result<()> {
        self.st.lock().unwrap().asked = match start {
            Some(Start::Sequence(n)) => n,
            _ => 0,
        };
        let ans = conn.call_sub(self.frame(start), self.clone(), timeout).await?;
        let sid = ans.get("sub").and_then(Value::as_str).ok_or_else(|| Error::protocol("a subscribed answer without sub"))?;
        let mut st = self.st.lock().unwrap();
        if st.stopping {
            // Unsubscribed or closed while the answer was on its way (a
            // resubscription): the server subscription it names has no
            // owner, end it (the reader did not route it here).
            drop(st);
            conn.subs.lock().unwrap().remove(sid);
            conn.end_orphan(sid, false);
            return Ok(());
        }
        st.sid = Some(sid.to_string());
        st.conn = Some(conn.clone());
        Ok(())
    }

    /// Notes a subscribed answer routed to this subscription: the reader
    /// calls it before it reads the next frame, so that the deliveries that
    /// follow (and their acks) count in the position the answer sets (see
    /// [`SubState::started`]).
    pub(crate) fn subscribed(&self, ans: &Value) {
        let from = ans.get("from").and_then(Value::as_u64).unwrap_or(0);
        self.st.lock().unwrap().started(from);
    }

    /// Subscribes again on a new connection (see [`Subscription`],
    /// "Resuming"): on a pub/sub subject from the lowest sequence received
    /// and not yet handled successfully, else after the highest acked, else
    /// at the `from` of the latest subscribed answer, else where it first
    /// started (a server that names no `from`). The pending set is emptied
    /// before the subscribe leaves (the new deliveries may follow its answer
    /// at once) and given back when it fails, so that the next attempt
    /// still starts there. A subscription that is stopping is not
    /// resubscribed: its unsubscribe ends it.
    pub(crate) async fn resubscribe(self: &Arc<Self>, conn: &Arc<Conn>, timeout: Duration) -> Result<()> {
        if self.is_stopping() {
            return Ok(());
        }
        let (at, taken) = {
            let mut st = self.st.lock().unwrap();
            (st.resume_at(), std::mem::take(&mut st.pending))
        };
        let res = match at {
            0 => self.subscribe_with(conn, self.opts.start, timeout).await,
            _ if self.opts.group.is_some() => self.subscribe_with(conn, self.opts.start, timeout).await,
            n => match self.subscribe_with(conn, Some(Start::Sequence(n)), timeout).await {
                // A work-queue subject: the group keeps its place.
                Err(e) if e.code == "INVALID_ARGUMENT" => self.subscribe_with(conn, self.opts.start, timeout).await,
                r => r,
            },
        };
        if res.is_err() {
            self.st.lock().unwrap().pending.extend(taken);
        }
        res
    }

    /// Queues a delivery for a handler or the stream's reader. `false` when
    /// the subscription has ended: the server subscription the delivery
    /// came from has no owner any more.
    pub(crate) fn dispatch(self: &Arc<Self>, conn: Arc<Conn>, sid: &str, message: Message, attempt: u32) -> bool {
        {
            let st = self.st.lock().unwrap();
            if st.ended {
                return false;
            }
            if st.stopping {
                return true; // left unanswered: the unsubscribe that follows gives it back
            }
        }
        let key = conn_key(&conn);
        if self.opts.ack == Ack::Explicit {
            let mut q = self.queued.lock().unwrap();
            if q.conn != key {
                q.conn = key;
                q.live = 0;
            }
            if q.live >= self.window() {
                // More deliveries waiting than the window the client asked
                // for, which a server that keeps the window never sends:
                // left unanswered, for the server's ack wait to give back,
                // rather than queued without end (as the Go client does).
                drop(q);
                self.overflow_one();
                return true;
            }
            q.live += 1;
            q.n += 1;
        }
        {
            let mut st = self.st.lock().unwrap();
            let seq = resumable(message.sequence);
            if self.opts.ack == Ack::None {
                st.last_acked = st.last_acked.max(seq);
            } else if seq > 0 {
                st.outstand(seq);
            }
        }
        let mut size = 0;
        if self.opts.ack == Ack::None {
            size = data_size(&message.data);
            let mut q = self.queued.lock().unwrap();
            // One of any size is queued when none is.
            if q.n > 0 && (q.n >= MAX_QUEUED || q.bytes + size > MAX_QUEUED_BYTES) {
                drop(q);
                self.drop_one();
                return true;
            }
            q.n += 1;
            q.bytes += size;
        }
        let settled = (self.opts.ack == Ack::Explicit && matches!(self.mode, SubMode::Handler(_))).then(Arc::default);
        let d =
            Delivery { message, attempt, handle: AckHandle { sub: self.clone(), conn, sid: sid.to_string() }, held: None, size, settled };
        let queued = match &self.mode {
            SubMode::Handler(_) => self.queue_tx.send(d).is_ok(),
            SubMode::Stream(buf) => {
                let mut b = buf.lock().unwrap();
                if b.ended {
                    false
                } else {
                    if b.items.front().is_some_and(|f| self.stale(f)) {
                        self.discard_stale(&mut b.items);
                    }
                    b.items.push_back(d);
                    if let Some(w) = b.waker.take() {
                        w.wake();
                    }
                    true
                }
            }
        };
        if !queued {
            self.dequeued(size, key);
        }
        true
    }

    /// The window asked of the server: deliveries it may have unanswered
    /// (at least 1: a window of 0 set as a field would leave every
    /// delivery beyond it).
    fn window(&self) -> usize {
        self.opts.window.unwrap_or(self.opts.max_in_flight.max(256)).max(1) as usize
    }

    /// An acknowledged delivery beyond the window: counted, and reported at
    /// 1, 2, 4, …
    fn overflow_one(&self) {
        let n = self.overflow.fetch_add(1, Ordering::AcqRel) + 1;
        if n.is_power_of_two() {
            self.report(Error::protocol(format!(
                "deliveries of {} beyond the subscription's window ({}) left unanswered ({n} so far)",
                self.subject,
                self.window()
            )));
        }
    }

    /// The next delivery of a stream subscription for its reader. A
    /// delivery of an acknowledged subscription whose connection is gone
    /// is skipped: it cannot be answered, and the server delivers it again
    /// on the next connection. Once the subscription stops or ends nothing
    /// more is handed out: the error that ended it, if any, then `None`.
    fn poll_delivery(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Delivery>>> {
        let SubMode::Stream(buf) = &self.mode else { return Poll::Ready(None) };
        let mut b = buf.lock().unwrap();
        loop {
            if let Some(mut d) = b.items.pop_front() {
                self.dequeued(d.size, conn_key(&d.handle.conn));
                if self.stale(&d) {
                    continue;
                }
                if self.opts.ack == Ack::Explicit {
                    // Counted before the buffer's lock is let go: a stop that
                    // follows sees it.
                    self.held.send_modify(|n| *n += 1);
                    d.held = Some(Arc::new(Held {
                        handle: d.handle.clone(),
                        id: d.message.id.clone(),
                        seq: d.message.sequence,
                        answered: AtomicBool::new(false),
                    }));
                }
                return Poll::Ready(Some(Ok(d)));
            }
            if b.ended {
                return Poll::Ready(b.err.take().map(Err));
            }
            b.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
    }

    /// A delivery that can no longer be answered: its connection is gone
    /// (an acknowledged subscription; at most once, it was done when sent).
    fn stale(&self, d: &Delivery) -> bool {
        self.opts.ack == Ack::Explicit && d.handle.conn.is_dead()
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.st.lock().unwrap().stopping
    }

    fn is_ended(&self) -> bool {
        self.st.lock().unwrap().ended
    }

    /// Whether the caller runs in a handler of any subscription.
    pub(crate) fn in_any_handler() -> bool {
        HANDLER_OF.try_with(|_| ()).is_ok()
    }

    /// Whether the caller runs in one of this subscription's handlers.
    pub(crate) fn in_own_handler(&self) -> bool {
        HANDLER_OF.try_with(|k| *k == self as *const SubShared as usize).unwrap_or(false)
    }

    /// How many stream deliveries the reader holds unanswered.
    pub(crate) fn held_count(&self) -> usize {
        *self.held.borrow()
    }

    /// Stops taking deliveries: those that arrive, and those queued or
    /// buffered but not yet handed to a handler or the stream's reader, are
    /// left unanswered (the unsubscribe that follows gives them back to
    /// the server without an attempt spent; at most once, they are
    /// dropped). Returns whether it was stopping already.
    pub(crate) fn stop(&self) -> bool {
        let was = std::mem::replace(&mut self.st.lock().unwrap().stopping, true);
        self.release_stream(None);
        was
    }

    /// Ends a stream's buffer: what it holds is dropped, and its reader
    /// gets `err` (if any), then `None`.
    fn release_stream(&self, err: Option<Error>) {
        let SubMode::Stream(buf) = &self.mode else { return };
        let (items, waker) = {
            let mut b = buf.lock().unwrap();
            if !b.ended {
                b.ended = true;
                b.err = err;
            }
            (std::mem::take(&mut b.items), b.waker.take())
        };
        for d in &items {
            self.dequeued(d.size, conn_key(&d.handle.conn));
        }
        drop(items);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// An at-most-once delivery that found [`MAX_QUEUED`] waiting, or whose
    /// data would take the queue past [`MAX_QUEUED_BYTES`]: counted, and
    /// reported at 1, 2, 4, … so a slow handler does not flood `on_error`.
    fn drop_one(&self) {
        let n = self.dropped.fetch_add(1, Ordering::AcqRel) + 1;
        if n.is_power_of_two() {
            let mut details = Map::new();
            details.insert("subject".into(), json!(self.subject));
            details.insert("dropped".into(), json!(n));
            details.insert("maxQueued".into(), json!(MAX_QUEUED));
            details.insert("maxQueuedBytes".into(), json!(MAX_QUEUED_BYTES));
            self.report(Error::with_details(
                "DELIVERIES_DROPPED",
                format!(
                    "at-most-once deliveries of {} dropped: the handler does not keep up ({n} so far; at most {MAX_QUEUED} deliveries and {} MiB of data wait queued)",
                    self.subject,
                    MAX_QUEUED_BYTES >> 20
                ),
                details,
            ));
        }
    }

    /// A delivery whose data is `size` left the queue: a handler (or the
    /// stream's consumer) took it, or it was discarded.
    fn dequeued(&self, size: usize, conn: usize) {
        let mut q = self.queued.lock().unwrap();
        q.n -= 1;
        if self.opts.ack == Ack::None {
            q.bytes -= size;
        } else if q.conn == conn && q.live > 0 {
            q.live -= 1;
        }
    }

    /// Drops from `q` the deliveries no handler or reader may be handed any
    /// more: all of them once the subscription is stopping, else those of
    /// a lost connection (an acknowledged subscription: they can no longer
    /// be answered, and the resumed subscription delivers them again).
    /// Done as the deliveries of the next connection come, not only when a
    /// handler or the reader reaches them: a handler or reader that is
    /// stuck would otherwise keep a window's worth of each connection lost
    /// meanwhile, without bound.
    fn discard_stale(&self, q: &mut VecDeque<Delivery>) {
        let stopping = self.is_stopping();
        q.retain(|d| {
            let gone = stopping || self.stale(d);
            if gone {
                self.dequeued(d.size, conn_key(&d.handle.conn));
            }
            !gone
        });
    }

    pub(crate) fn report(&self, e: Error) {
        if let Some(s) = self.session.upgrade() {
            s.report(e);
        }
    }

    /// Queues the ack of `m`, a delivery handled successfully. Its
    /// sequence leaves the pending set and raises `last_acked` now, when
    /// its connection is up, whatever the server answers (see
    /// [`Subscription`], "Resuming"); on a connection already gone it
    /// stays, for the resume to ask for again.
    fn queue_ack(&self, h: &AckHandle, m: &Message, tx: Option<oneshot::Sender<Result<()>>>) {
        if !h.conn.is_dead() {
            let seq = resumable(m.sequence);
            let mut st = self.st.lock().unwrap();
            st.pending.remove(&seq);
            st.last_acked = st.last_acked.max(seq);
        }
        let cmd = AckCmd::Ack { h: h.clone(), id: m.id.clone(), seq: m.sequence, tx };
        if let Err(mpsc::error::SendError(AckCmd::Ack { tx: Some(tx), .. })) = self.ack_tx.send(cmd) {
            let _ = tx.send(Err(Error::closed()));
        }
    }

    /// Waits for the running handlers, and (at most `held_for`) for the
    /// stream deliveries the reader holds to be answered, then until the
    /// acks gathered are sent.
    async fn drain(&self, held_for: Duration) {
        let n = self.opts.max_in_flight.max(1);
        if let Ok(p) = self.sem.acquire_many(n).await {
            drop(p);
        }
        let mut held = self.held.subscribe();
        let _ = tokio::time::timeout(held_for, held.wait_for(|n| *n == 0)).await;
        let (tx, rx) = oneshot::channel();
        if self.ack_tx.send(AckCmd::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Ends a stopped subscription: waits for what user code holds (see
    /// [`drain`](Self::drain)), then reads where the subscription is (not
    /// before: a reconnect may happen meanwhile; a stopping subscription
    /// is not resubscribed, and a resubscription already on its way is
    /// ended when its answer comes), sends the unsubscribe there when that
    /// connection is still up, and ends the subscription whatever the
    /// answer.
    pub(crate) async fn finish(self: &Arc<Self>, timeout: Duration) -> Result<()> {
        self.drain(timeout).await;
        let target = {
            let st = self.st.lock().unwrap();
            if st.ended {
                None
            } else {
                st.conn.clone().zip(st.sid.clone())
            }
        };
        let mut res = Ok(());
        if let Some((c, sid)) = target {
            if !c.is_dead() {
                res = match c.call(obj(json!({"op": "unsubscribe", "sub": sid})), timeout).await {
                    // The connection ended, and the server subscription with it.
                    Err(e) if e.kind == ErrorKind::Transport => Ok(()),
                    r => r.map(|_| ()),
                };
            }
        }
        self.end(None);
        res
    }

    /// [`finish`](Self::finish) in the background; an error goes to `on_error`.
    fn finish_later(self: &Arc<Self>, timeout: Duration) {
        let s = self.clone();
        tokio::spawn(async move {
            if let Err(e) = s.finish(timeout).await {
                s.report(e);
            }
        });
    }

    /// Waits until the subscription has ended.
    pub(crate) async fn wait_done(&self) {
        let mut rx = self.done_tx.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Drops a subscription just made that the session can no longer keep
    /// (it closed or failed meanwhile), and its server subscription.
    pub(crate) fn abandon(self: &Arc<Self>) {
        let target = {
            let st = self.st.lock().unwrap();
            st.conn.clone().zip(st.sid.clone())
        };
        self.end(None);
        if let Some((c, sid)) = target {
            c.end_orphan(&sid, false);
        }
    }

    /// Ends the subscription, with the error that ended it (`None` when
    /// unsubscribed or closed).
    pub(crate) fn end(self: &Arc<Self>, err: Option<Error>) {
        let (conn, sid) = {
            let mut st = self.st.lock().unwrap();
            if st.ended {
                return;
            }
            st.ended = true;
            st.stopping = true;
            st.err = err.clone();
            (st.conn.take(), st.sid.clone())
        };
        if let (Some(c), Some(sid)) = (conn, sid) {
            let mut subs = c.subs.lock().unwrap();
            if subs.get(&sid).is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), Arc::as_ptr(self))) {
                subs.remove(&sid);
            }
        }
        self.release_stream(err.clone());
        if let Some(s) = self.session.upgrade() {
            s.remove_sub(self);
            if let Some(e) = err {
                s.report(e);
            }
        }
        let _ = self.done_tx.send_replace(true);
    }
}

async fn dispatch_loop(sub: Weak<SubShared>, h: Handler, mut rx: mpsc::UnboundedReceiver<Delivery>) {
    // The deliveries taken off the channel that wait for a handler: taken
    // while the handlers are busy, so that those of a lost connection are
    // dropped as the next connection's come (see `discard_stale`).
    let mut waiting: VecDeque<Delivery> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match rx.recv().await {
                Some(d) => waiting.push_back(d),
                None => return,
            }
        }
        let Some(s) = sub.upgrade() else { return };
        // Stopping: left unanswered, the unsubscribe gives them back.
        // Stale: their connection is gone, the server delivers them again.
        s.discard_stale(&mut waiting);
        if waiting.is_empty() {
            continue;
        }
        // The permit's future is made once, so it keeps its place in the
        // semaphore's queue (ahead of an `idle` that comes later).
        let acquire = s.sem.clone().acquire_owned();
        tokio::pin!(acquire);
        let permit = loop {
            tokio::select! {
                biased;
                p = &mut acquire => break p,
                d = rx.recv() => match d {
                    Some(d) => {
                        let new_conn = waiting.back().is_some_and(|b| !Arc::ptr_eq(&b.handle.conn, &d.handle.conn));
                        waiting.push_back(d);
                        if new_conn {
                            s.discard_stale(&mut waiting);
                        }
                    }
                    None => return,
                },
            }
        };
        let Ok(permit) = permit else { return };
        let Some(d) = waiting.pop_front() else { continue };
        if s.is_stopping() || s.stale(&d) {
            s.dequeued(d.size, conn_key(&d.handle.conn));
            continue; // while it waited for room
        }
        {
            let mut r = s.running.lock().unwrap();
            let key = run_key(&d.message);
            if let Some(parked) = r.get_mut(&key) {
                // Its handler runs: this one waits for that run (counted
                // in the window until it runs), and takes no permit.
                parked.push_back(d);
                continue;
            }
            r.insert(key, VecDeque::new());
        }
        s.dequeued(d.size, conn_key(&d.handle.conn)); // a handler takes it
        let key = Arc::as_ptr(&s) as usize;
        drop(s);
        let h = h.clone();
        tokio::spawn(async move {
            let mut d = d;
            loop {
                let (sub, run) = (d.handle.sub.clone(), run_key(&d.message));
                run_handler(&h, d, key).await;
                match sub.next_parked(&run) {
                    Some(next) => d = next,
                    None => break,
                }
            }
            drop(permit);
        });
    }
}

/// Runs the handler on `d` and answers it (see [`dispatch_loop`]).
async fn run_handler(h: &Handler, d: Delivery, key: usize) {
    let h = h.clone();
    let handle = d.handle.clone();
    let m = d.message.clone();
    let settled = d.settled.clone();
    // The handler is called inside the task, so that a panic while it
    // makes its future nacks as one inside the future does.
    let res = tokio::spawn(HANDLER_OF.scope(key, async move { h(d).await })).await;
    match res {
        _ if handle.sub.opts.ack == Ack::None => {}                   // at most once: nothing is answered
        _ if settled.is_some_and(|s| s.load(Ordering::Acquire)) => {} // the handler answered it
        Ok(Ok(())) => handle.sub.queue_ack(&handle, &m, None),
        Ok(Err(e)) => nack(&handle, &m.id, m.sequence, e.retry_after).await,
        Err(_) => nack(&handle, &m.id, m.sequence, None).await, // the handler panicked
    }
}

impl SubShared {
    /// After a run of message `run`'s handler: the next delivery of it
    /// that came meanwhile (parked), or `None`, and the message no longer
    /// runs. Parked deliveries that may no longer be handed out (the
    /// subscription stopped, their connection is gone) are dropped.
    fn next_parked(&self, run: &RunKey) -> Option<Delivery> {
        loop {
            let d = {
                let mut r = self.running.lock().unwrap();
                let q = r.get_mut(run)?;
                match q.pop_front() {
                    Some(d) => d,
                    None => {
                        r.remove(run);
                        return None;
                    }
                }
            };
            self.dequeued(d.size, conn_key(&d.handle.conn));
            if self.is_stopping() || self.stale(&d) {
                continue;
            }
            return Some(d);
        }
    }
}

/// Nacks a delivery a handler failed on or a stream's reader dropped; an
/// error other than a lost connection goes to `on_error`.
async fn nack(h: &AckHandle, id: &str, seq: u64, delay: Option<Duration>) {
    let mut f = answer_frame("nack", &h.sid, id, seq);
    if let Some(d) = delay {
        // A handler's longer `retry_after` waits the longest the broker
        // takes (12 hours), as it does in the Go client.
        f["delayMs"] = json!(crate::time::retry_delay_ms(d));
    }
    if let Err(e) = h.conn.call(obj(f), Duration::from_secs(30)).await {
        if e.kind != ErrorKind::Transport {
            h.sub.report(e);
        }
    }
}

/// An ack gathered: the message id, the delivery's sequence (as the server
/// sent it; 0: none) and who waits for its answer.
type AckItem = (String, u64, Option<oneshot::Sender<Result<()>>>);

/// What an ack frame takes besides its sub and ids: its op, id and field
/// names.
const ACK_FRAME_BASE: usize = 256;

/// At most what an ack of message `id` adds to an ack frame, in bytes: the
/// id as serde_json writes it (a printable ASCII character one byte, a
/// quote or a backslash two, any other byte at most six), its quotes and
/// comma, and its sequence in `sequences`.
fn ack_cost(id: &str) -> usize {
    let plain = id.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
    (if plain { id.len() } else { 6 * id.len() }) + 32
}

/// Splits `items`, acks of one subscription, into runs that each make an
/// ack frame within `limit` bytes (the server's `maxFrame`: a window of
/// thousands of long ids is more than one frame holds, and the server
/// would close the connection).
fn ack_frames(sid: &str, mut items: Vec<AckItem>, limit: usize) -> Vec<Vec<AckItem>> {
    let mut out = Vec::new();
    while !items.is_empty() {
        let mut size = ACK_FRAME_BASE + ack_cost(sid) + ack_cost(&items[0].0);
        let mut n = 1;
        while n < items.len() {
            size += ack_cost(&items[n].0);
            if size > limit {
                break;
            }
            n += 1;
        }
        let rest = items.split_off(n);
        out.push(items);
        items = rest;
    }
    out
}

/// The answers an ack frame's `ok` says were not taken: `notPending`
/// names their ids; when `notPendingSequences` goes in step with it, each
/// is an id at a sequence (0: the answer named none), so one id answered
/// at two sequences, one settled, is told apart. Without it (protocol
/// v1), every answer of a listed id was refused. Ids only: anything else
/// in the list is passed over.
enum NotPending {
    Ids(Vec<String>),
    Pairs(Vec<(String, u64)>),
}

impl NotPending {
    fn of(answer: &Value) -> NotPending {
        let ids: &[Value] = answer.get("notPending").and_then(Value::as_array).map_or(&[], Vec::as_slice);
        match answer.get("notPendingSequences").and_then(Value::as_array) {
            Some(seqs) if seqs.len() == ids.len() => {
                NotPending::Pairs(ids.iter().zip(seqs).filter_map(|(i, q)| Some((i.as_str()?.to_string(), q.as_u64()?))).collect())
            }
            _ => NotPending::Ids(ids.iter().filter_map(|x| x.as_str().map(String::from)).collect()),
        }
    }

    /// Whether the answer of `id` at `seq` (0: none sent) was refused.
    fn refused(&self, id: &str, seq: u64) -> bool {
        match self {
            NotPending::Ids(ids) => ids.iter().any(|x| x == id),
            NotPending::Pairs(pairs) => pairs.iter().any(|(x, q)| x == id && *q == seq),
        }
    }
}

async fn ack_loop(mut rx: mpsc::UnboundedReceiver<AckCmd>) {
    while let Some(first) = rx.recv().await {
        let mut cmds = vec![first];
        while let Ok(c) = rx.try_recv() {
            cmds.push(c);
        }
        let mut flushes = Vec::new();
        // Group acks by connection and subscription id, in order.
        let mut groups: Vec<(AckHandle, Vec<AckItem>)> = Vec::new();
        for c in cmds {
            match c {
                AckCmd::Flush(tx) => flushes.push(tx),
                AckCmd::Ack { h, id, seq, tx } => match groups.iter_mut().find(|(g, _)| Arc::ptr_eq(&g.conn, &h.conn) && g.sid == h.sid) {
                    Some((_, v)) => v.push((id, seq, tx)),
                    None => groups.push((h, vec![(id, seq, tx)])),
                },
            }
        }
        let batches = groups.into_iter().flat_map(|(h, items)| {
            let limit = usize::try_from(h.conn.max_frame.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
            ack_frames(&h.sid, items, limit).into_iter().map(move |b| (h.clone(), b))
        });
        for (h, items) in batches {
            // Each id goes with the sequence of the delivery it answers.
            let f = if items.len() == 1 {
                answer_frame("ack", &h.sid, &items[0].0, items[0].1)
            } else {
                let ids: Vec<&str> = items.iter().map(|(id, _, _)| id.as_str()).collect();
                let seqs: Vec<u64> = items.iter().map(|(_, seq, _)| *seq).collect();
                json!({"op": "ack", "sub": h.sid, "messageIds": ids, "sequences": seqs})
            };
            let res = h.conn.call(obj(f), Duration::from_secs(30)).await;
            let not_pending = match &res {
                Ok(a) => NotPending::of(a),
                Err(_) => NotPending::Ids(Vec::new()),
            };
            // The pending set is not touched here: queue_ack took each
            // sequence out when its delivery was handled, whatever this
            // answer says.
            for (id, seq, tx) in items {
                let r = match &res {
                    Ok(_) if not_pending.refused(&id, seq) => {
                        Err(Error::new("ACK_NOT_ALLOWED", format!("no delivery of {id} is waiting for an answer")))
                    }
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.clone()),
                };
                match tx {
                    Some(tx) => {
                        let _ = tx.send(r);
                    }
                    None => {
                        if let Err(e) = r {
                            if e.kind != ErrorKind::Transport {
                                h.sub.report(e);
                            }
                        }
                    }
                }
            }
        }
        for tx in flushes {
            let _ = tx.send(());
        }
    }
}

/// A running subscription. With [`Session::subscribe_stream`] it is also
/// a [`Stream`] of deliveries (`futures_util::StreamExt::next`, or
/// [`recv`](Subscription::recv)).
///
/// **How it ends.** [`unsubscribe`](Subscription::unsubscribe) and the
/// session's [`close`](Session::close) stop deliveries at once. Deliveries
/// the client holds that no handler or reader has been handed yet (queued
/// behind busy handlers, or buffered in a stream ahead of its reader) go
/// back unanswered: the unsubscribe gives them back to the server without
/// an attempt spent (on a work queue another consumer gets them at once);
/// at most once ([`Ack::None`]) they are dropped. A stream's reader is
/// handed nothing more: `None` next (after the error that ended it, when
/// one did). Handlers already running finish, and their answers are sent
/// before the unsubscribe; so are the answers to stream deliveries the
/// reader holds (see `unsubscribe`).
///
/// Dropping a handler subscription does not unsubscribe: its handler runs
/// until `unsubscribe`, `close` or the end. Dropping a stream subscription
/// unsubscribes, in the background: a reader that leaves its loop early
/// (`break`, `?`, a panic) ends it, and a delivery it held and dropped
/// unanswered is nacked (sent before the unsubscribe).
///
/// After a lost connection that the session recovers from, an
/// acknowledged subscription is not handed the deliveries left over from
/// the lost connection (they can no longer be answered; the resumed
/// subscription gets them again): a stream's reader goes on with those of
/// the new connection. At most once, they were done when sent: they are
/// still handed out.
///
/// **Resuming.** On a pub/sub subject the server keeps a cursor per
/// subscription and redelivers a nacked or unanswered delivery only on that
/// same subscription, so whatever the resumed subscription does not ask for
/// again is never delivered again. An acknowledged subscription therefore
/// keeps the set of sequences it was handed and has not yet handled
/// successfully. A handler's success (the ack) removes its sequence and
/// raises the highest-acked mark, once the ack is queued: an ack the server
/// refuses or never answers does not put it back (the handler succeeded;
/// kept, the lowest sequence would make the resume deliver again every
/// message after it, and a redelivery the server sends while the
/// connection lives adds it again); a failure (nack) keeps it in the set
/// (while the connection lives the server redelivers it, and a redelivery
/// that succeeds removes it); so does a success on a connection already
/// lost (it cannot be acked). On resume the subscription starts from the lowest
/// sequence in the set if any, else after the highest acked, else at the
/// `from` of its latest `subscribed` answer (the first sequence the server
/// subscription delivers: where its start stood when it subscribed, so
/// that what was published while the connection was down is not skipped),
/// else at its original start (a server that names no `from`); then the
/// set is cleared (the resumed subscription's deliveries add again, and its
/// `subscribed` answer names the next `from`). A `from` below the sequence
/// a resume asked for means the subject was numbered anew (the broker lost
/// its store): the highest acked is forgotten, so the next resume continues
/// in the new numbering rather than ask for the old position again. The set holds at most 65,536
/// sequences: when full, the lowest quarter is forgotten. Deliveries
/// still queued in the client from the lost connection are dropped, not
/// run: the resumed subscription delivers them again. A duplicate after a resume is allowed (at least once); a
/// skipped one is not. At most once ([`Ack::None`]) a resume starts after
/// the last message received, else at `from`, else at its original start;
/// a work-queue group keeps its place on the server (its answer names no
/// `from`). A message numbered 2^64-1 (no broker numbers that far) counts
/// in none of these, as in the Go client: see `resumable`.
pub struct Subscription {
    shared: Arc<SubShared>,
    session: Session,
}

impl Subscription {
    pub(crate) fn new(shared: Arc<SubShared>, session: Session) -> Subscription {
        Subscription { shared, session }
    }

    /// The server's id of the subscription; it changes on reconnect.
    pub fn id(&self) -> Option<String> {
        self.shared.st.lock().unwrap().sid.clone()
    }

    pub fn subject(&self) -> &str {
        &self.shared.subject
    }

    /// The next delivery of a stream subscription: `Err` with the error
    /// that ended the subscription (once), `None` once it has stopped or
    /// ended (at once after `unsubscribe` or `close`: what was buffered is
    /// not handed out). Always `None` for a handler subscription.
    pub async fn recv(&mut self) -> Option<Result<Delivery>> {
        std::future::poll_fn(|cx| self.shared.poll_delivery(cx)).await
    }

    /// How many deliveries of an [`Ack::None`] subscription were dropped
    /// because [`MAX_QUEUED`] were already waiting, or their data would
    /// have taken the queue past [`MAX_QUEUED_BYTES`] (0 for an acknowledged
    /// one).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Acquire)
    }

    /// Whether the subscription has ended.
    pub fn is_done(&self) -> bool {
        *self.shared.done_tx.borrow()
    }

    /// Why the subscription ended, once it has (`None` when unsubscribed).
    pub fn error(&self) -> Option<Error> {
        self.shared.st.lock().unwrap().err.clone()
    }

    /// Waits until the subscription ends; returns the error that ended it
    /// (`CONTRACT_REVOKED`, `GRANT_REVOKED`, …), `None` when unsubscribed.
    pub async fn done(&self) -> Option<Error> {
        let mut rx = self.shared.done_tx.subscribe();
        let _ = rx.wait_for(|d| *d).await;
        self.error()
    }

    /// Waits until none of this subscription's handlers is running and the
    /// acks and nacks of those that ran are answered by the server, so that
    /// what was acknowledged is not delivered again, even by a server
    /// restarted on the same store. Deliveries that arrive meanwhile run,
    /// and are waited for too. On a stream it waits for the acks the reader
    /// sent, not for deliveries it holds. Called from inside one of this
    /// subscription's handlers it would wait for itself: don't.
    pub async fn idle(&self) {
        self.shared.drain(Duration::ZERO).await
    }

    /// Stops deliveries (see the type's doc: those not yet handed out go
    /// back unanswered, at most once they are dropped), waits for running
    /// handlers, sends their acks, then the unsubscribe (on the connection
    /// the subscription is on once the handlers are done: a reconnect may
    /// come meanwhile), and returns once the subscription has ended. An
    /// error answer to the unsubscribe is returned, but the subscription
    /// ends all the same; a lost connection is no error (the server
    /// subscription ended with it). When the subscription is stopping
    /// already (another unsubscribe, or the session's close), it sends no
    /// second unsubscribe and waits for that end (except as below).
    ///
    /// It does not wait for what the caller itself holds, which would wait
    /// forever: called from inside one of this subscription's handlers (in
    /// the handler's own task; a task it spawns is not recognized), or
    /// on a stream whose reader holds deliveries unanswered, it stops
    /// deliveries and returns at once, and the subscription ends in the
    /// background once that handler has returned (its answer sent first),
    /// or once those deliveries are answered or dropped (at most
    /// `call_timeout`; dropped unanswered, a delivery is nacked). Wait for
    /// that end with [`done`](Subscription::done), from elsewhere.
    pub async fn unsubscribe(&self) -> Result<()> {
        let s = &self.shared;
        let inside = s.in_own_handler();
        if s.stop() {
            if !inside && s.held_count() == 0 {
                s.wait_done().await;
            }
            return Ok(());
        }
        let timeout = self.session.inner.opts.call_timeout;
        if inside || s.held_count() > 0 {
            s.finish_later(timeout);
            return Ok(());
        }
        // In a task of its own: a caller that gives up (a timeout around
        // this call, a dropped future) does not leave the subscription
        // stopped but never ended, which a later unsubscribe or done()
        // would wait for without end.
        let s = s.clone();
        match tokio::spawn(async move { s.finish(timeout).await }).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Error::closed()), // the runtime is shutting down
        }
    }
}

impl Drop for Subscription {
    /// A stream subscription unsubscribes: nothing can read it any more.
    fn drop(&mut self) {
        if !matches!(self.shared.mode, SubMode::Stream(_)) || self.shared.stop() {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            self.shared.finish_later(self.session.inner.opts.call_timeout);
        } else {
            self.shared.end(None); // no runtime: a delivery that still comes ends the server subscription
        }
    }
}

impl Stream for Subscription {
    type Item = Result<Delivery>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.shared.poll_delivery(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_of(opts: SubscribeOptions) -> Map<String, Value> {
        SubShared::new("events.telemetry", opts, SubMode::Stream(Mutex::default()), Weak::new()).frame(None)
    }

    #[tokio::test]
    async fn the_subscribe_frame_carries_the_ack_mode() {
        assert_eq!(SubscribeOptions::default().ack, Ack::Explicit);
        assert_eq!(frame_of(SubscribeOptions::default()).get("ack"), None, "the default sends no ack field");
        assert_eq!(frame_of(SubscribeOptions::default().ack(Ack::Explicit)).get("ack"), None);
        let f = frame_of(SubscribeOptions::default().ack(Ack::None).window(2));
        assert_eq!(f.get("ack"), Some(&json!("none")), "{f:?}");
        assert_eq!(f.get("window"), Some(&json!(2)));
    }

    /// A reader that does not read, or a handler that does not return,
    /// while the connection is lost again and again: the deliveries of
    /// each lost connection are dropped as the next one's come, so what
    /// waits in the client stays within about one window.
    #[tokio::test]
    async fn deliveries_of_lost_connections_do_not_pile_up_behind_a_stuck_reader_or_handler() {
        let stuck: Handler = Arc::new(|_d| Box::pin(std::future::pending()));
        for (name, mode) in [("stream", SubMode::Stream(Mutex::default())), ("handler", SubMode::Handler(stuck))] {
            let s = SubShared::new("x", SubscribeOptions::default().window(4), mode, Weak::new());
            let mut seq = 0;
            for _ in 0..20 {
                let c = Conn::detached();
                for _ in 0..4 {
                    seq += 1;
                    let m = Message { id: format!("msg_{seq}"), sequence: seq, ..Message::default() };
                    assert!(s.dispatch(c.clone(), "sub_1", m, 1));
                }
                tokio::time::sleep(Duration::from_millis(5)).await; // the handler's loop takes them
                c.lose();
            }
            let n = s.queued.lock().unwrap().n;
            assert!(n <= 8, "{name}: {n} deliveries wait after 20 lost connections (window 4)");
        }
    }

    /// 2^64-1 is no resume position (see `resumable`), acknowledged or at
    /// most once: the resume starts as if that message had not been numbered.
    #[tokio::test]
    async fn the_largest_sequence_is_no_resume_position() {
        for ack in [Ack::Explicit, Ack::None] {
            let s = SubShared::new("x", SubscribeOptions::default().ack(ack), SubMode::Stream(Mutex::default()), Weak::new());
            let m = Message { id: "msg_top".into(), sequence: u64::MAX, ..Message::default() };
            assert!(s.dispatch(Conn::detached(), "sub_1", m, 1));
            let st = s.st.lock().unwrap();
            assert_eq!((st.resume_at(), st.pending.len(), st.last_acked), (0, 0, 0), "{ack:?}");
        }
        assert_eq!((resumable(u64::MAX - 1), resumable(1), resumable(0)), (u64::MAX - 1, 1, 0));
    }

    #[test]
    fn a_subscription_remembers_at_most_65536_outstanding_sequences() {
        assert_eq!(MAX_OUTSTANDING, 65_536, "the Go client's bound");
        let max = MAX_OUTSTANDING as u64;
        let mut st = SubState::default();
        // Handed over highest first: the quarter forgotten is the lowest,
        // not the first added.
        for seq in (1..=max).rev() {
            st.outstand(seq);
        }
        assert_eq!(st.pending.len(), MAX_OUTSTANDING);
        assert_eq!(st.resume_at(), 1, "nothing is forgotten until the set is full");
        let k = 10;
        for seq in max + 1..=max + k {
            st.outstand(seq);
            assert!(st.pending.len() <= MAX_OUTSTANDING, "{} sequences held after {seq}", st.pending.len());
        }
        let quarter = max / 4;
        assert!(st.pending.iter().copied().eq(quarter + 1..=max + k), "the lowest quarter, and only it, was forgotten");
        assert_eq!(st.resume_at(), quarter + 1, "a resume starts at the lowest sequence remaining");
        st.pending.remove(&(quarter + 1)); // handled at last
        assert_eq!(st.resume_at(), quarter + 2);
    }
}
