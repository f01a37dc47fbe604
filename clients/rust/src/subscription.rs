//! Subscriptions: push delivery to a handler or a stream, acks gathered
//! into frames, resumption after a reconnect.

use crate::conn::Conn;
use crate::error::{Error, ErrorKind, Result};
use crate::message::Message;
use crate::session::{Inner, Session};
use futures_util::Stream;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

/// The most deliveries of an [`Ack::None`] subscription queued in the
/// client, waiting for a handler (or for the consumer of a stream
/// subscription). The server does not flow-control such a subscription
/// (nothing is answered, so the window holds nothing back): beyond this
/// bound the client drops deliveries, as at most once allows, rather than
/// queue them without limit. [`Subscription::dropped`] counts them, and
/// `on_error` receives a `DELIVERIES_DROPPED` error ([`ErrorKind::Dropped`])
/// at drop counts 1, 2, 4, 8, … An acknowledged subscription is bounded by
/// its window, which the server keeps.
pub const MAX_QUEUED: usize = 4096;

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
    /// [`MAX_QUEUED`] of them (for a stream subscription too): the client
    /// drops those beyond, counts them ([`Subscription::dropped`]) and
    /// reports them to `on_error` as `DELIVERIES_DROPPED` at drop counts
    /// 1, 2, 4, 8, … A resubscription after a reconnect starts after the
    /// last message received. The server refuses it on a work-queue
    /// subject (`INVALID_ARGUMENT`).
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
    Stream(Mutex<Option<mpsc::UnboundedSender<Result<Delivery>>>>),
}

/// One message handed to a subscription.
#[derive(Clone)]
pub struct Delivery {
    pub message: Message,
    /// Counts deliveries of this message to this subscription (pub/sub) or
    /// group (work queue), from 1.
    pub attempt: u32,
    handle: AckHandle,
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
    /// wait passed. Handlers do not call it: their result settles. On an
    /// [`Ack::None`] subscription it sends nothing and returns `Ok`.
    pub async fn ack(&self) -> Result<()> {
        if self.handle.sub.opts.ack == Ack::None {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        self.handle.sub.queue_ack(&self.handle, &self.message, Some(tx));
        rx.await.unwrap_or_else(|_| Err(Error::closed()))
    }

    /// Gives the delivery back for redelivery after `delay` (default: the
    /// subject's backoff). On an [`Ack::None`] subscription it sends
    /// nothing and returns `Ok`: nothing is redelivered.
    pub async fn nack(&self, delay: Option<Duration>) -> Result<()> {
        if self.handle.sub.opts.ack == Ack::None {
            return Ok(());
        }
        let mut f = json!({"op": "nack", "sub": self.handle.sid, "messageId": self.message.id});
        if let Some(d) = delay {
            f["delayMs"] = json!(d.as_millis() as u64);
        }
        self.handle.conn.call(obj(f), Duration::from_secs(30)).await.map(|_| ())
    }
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
    /// A pub/sub resubscription starts after it: the last message acked
    /// (at most once: the last received).
    last_acked: u64,
    stopping: bool,
    ended: bool,
    err: Option<Error>,
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
    /// [`Ack::None`]: the deliveries queued and not yet taken by a handler
    /// (or the stream's consumer), at most [`MAX_QUEUED`].
    queued: AtomicUsize,
    /// [`Ack::None`]: the deliveries dropped because the queue was full.
    dropped: AtomicU64,
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
            queued: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        });
        tokio::spawn(ack_loop(Arc::downgrade(&s), ack_rx));
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
            "window": o.window.unwrap_or(o.max_in_flight.max(256)),
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
        let ans = conn.call_sub(self.frame(start), self.clone(), timeout).await?;
        let sid = ans.get("sub").and_then(Value::as_str).ok_or_else(|| Error::protocol("a subscribed answer without sub"))?;
        let mut st = self.st.lock().unwrap();
        st.sid = Some(sid.to_string());
        st.conn = Some(conn.clone());
        Ok(())
    }

    /// Subscribes again on a new connection, after the last acknowledged
    /// message when there is one (pub/sub), else where it started.
    pub(crate) async fn resubscribe(self: &Arc<Self>, conn: &Arc<Conn>, timeout: Duration) -> Result<()> {
        let last = self.st.lock().unwrap().last_acked;
        if last > 0 && self.opts.group.is_none() {
            match self.subscribe_with(conn, Some(Start::Sequence(last + 1)), timeout).await {
                Err(e) if e.code == "INVALID_ARGUMENT" => {} // a work-queue subject: the group keeps its place
                r => return r,
            }
        }
        self.subscribe_with(conn, self.opts.start, timeout).await
    }

    pub(crate) fn dispatch(self: &Arc<Self>, conn: Arc<Conn>, sid: &str, message: Message, attempt: u32) {
        {
            let mut st = self.st.lock().unwrap();
            if st.stopping {
                return; // left unanswered: it goes back to the group
            }
            if self.opts.ack == Ack::None {
                st.last_acked = st.last_acked.max(message.sequence);
            }
        }
        if self.opts.ack == Ack::None
            && self.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_QUEUED).then_some(n + 1)).is_err()
        {
            self.drop_one();
            return;
        }
        let d = Delivery { message, attempt, handle: AckHandle { sub: self.clone(), conn, sid: sid.to_string() } };
        let queued = match &self.mode {
            SubMode::Handler(_) => self.queue_tx.send(d).is_ok(),
            SubMode::Stream(tx) => match tx.lock().unwrap().as_ref() {
                Some(tx) => tx.send(Ok(d)).is_ok(),
                None => false,
            },
        };
        if !queued {
            self.dequeued();
        }
    }

    /// An at-most-once delivery that found [`MAX_QUEUED`] waiting: counted,
    /// and reported at 1, 2, 4, … so a slow handler does not flood `on_error`.
    fn drop_one(&self) {
        let n = self.dropped.fetch_add(1, Ordering::AcqRel) + 1;
        if n.is_power_of_two() {
            let mut details = Map::new();
            details.insert("subject".into(), json!(self.subject));
            details.insert("dropped".into(), json!(n));
            details.insert("maxQueued".into(), json!(MAX_QUEUED));
            self.report(Error::with_details(
                "DELIVERIES_DROPPED",
                format!(
                    "at-most-once deliveries of {} dropped: the handler does not keep up ({n} so far; at most {MAX_QUEUED} wait queued)",
                    self.subject
                ),
                details,
            ));
        }
    }

    /// A delivery left the queue: a handler (or the stream's consumer) took
    /// it, or it was discarded.
    fn dequeued(&self) {
        if self.opts.ack == Ack::None {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(crate) fn report(&self, e: Error) {
        if let Some(s) = self.session.upgrade() {
            s.report(e);
        }
    }

    fn queue_ack(&self, h: &AckHandle, m: &Message, tx: Option<oneshot::Sender<Result<()>>>) {
        let cmd = AckCmd::Ack { h: h.clone(), id: m.id.clone(), seq: m.sequence, tx };
        if let Err(mpsc::error::SendError(AckCmd::Ack { tx: Some(tx), .. })) = self.ack_tx.send(cmd) {
            let _ = tx.send(Err(Error::closed()));
        }
    }

    /// Stops taking deliveries, waits for running handlers and sends their acks.
    pub(crate) async fn stop_and_flush(&self) {
        self.st.lock().unwrap().stopping = true;
        let n = self.opts.max_in_flight.max(1);
        if let Ok(p) = self.sem.acquire_many(n).await {
            drop(p);
        }
        let (tx, rx) = oneshot::channel();
        if self.ack_tx.send(AckCmd::Flush(tx)).is_ok() {
            let _ = rx.await;
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
            c.subs.lock().unwrap().remove(&sid);
        }
        if let SubMode::Stream(tx) = &self.mode {
            if let Some(tx) = tx.lock().unwrap().take() {
                if let Some(e) = err.clone() {
                    let _ = tx.send(Err(e));
                }
            }
        }
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
    while let Some(d) = rx.recv().await {
        let Some(s) = sub.upgrade() else { return };
        if s.st.lock().unwrap().stopping {
            s.dequeued();
            continue;
        }
        let Ok(permit) = s.sem.clone().acquire_owned().await else { return };
        s.dequeued(); // a handler takes it
        if s.st.lock().unwrap().stopping {
            continue; // stopped while waiting for room: left unanswered
        }
        drop(s);
        let h = h.clone();
        tokio::spawn(async move {
            let handle = d.handle.clone();
            let m = d.message.clone();
            let res = tokio::spawn(h(d)).await;
            match res {
                _ if handle.sub.opts.ack == Ack::None => {} // at most once: nothing is answered
                Ok(Ok(())) => handle.sub.queue_ack(&handle, &m, None),
                Ok(Err(e)) => nack_after_failure(&handle, &m, e.retry_after).await,
                Err(_) => nack_after_failure(&handle, &m, None).await, // the handler panicked
            }
            drop(permit);
        });
    }
}

async fn nack_after_failure(h: &AckHandle, m: &Message, delay: Option<Duration>) {
    let mut f = json!({"op": "nack", "sub": h.sid, "messageId": m.id});
    if let Some(d) = delay {
        f["delayMs"] = json!(d.as_millis() as u64);
    }
    if let Err(e) = h.conn.call(obj(f), Duration::from_secs(30)).await {
        if e.kind != ErrorKind::Transport {
            h.sub.report(e);
        }
    }
}

type AckItem = (String, u64, Option<oneshot::Sender<Result<()>>>);

async fn ack_loop(sub: Weak<SubShared>, mut rx: mpsc::UnboundedReceiver<AckCmd>) {
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
        for (h, items) in groups {
            let ids: Vec<&str> = items.iter().map(|(id, _, _)| id.as_str()).collect();
            let f = if ids.len() == 1 {
                json!({"op": "ack", "sub": h.sid, "messageId": ids[0]})
            } else {
                json!({"op": "ack", "sub": h.sid, "messageIds": ids})
            };
            let res = h.conn.call(obj(f), Duration::from_secs(30)).await;
            let not_pending: Vec<String> = match &res {
                Ok(a) => a
                    .get("notPending")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let mut max_seq = 0;
            for (id, seq, tx) in items {
                let r = match &res {
                    Ok(_) if not_pending.contains(&id) => {
                        Err(Error::new("ACK_NOT_ALLOWED", format!("no delivery of {id} is waiting for an answer")))
                    }
                    Ok(_) => {
                        max_seq = max_seq.max(seq);
                        Ok(())
                    }
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
            if let Some(s) = sub.upgrade() {
                let mut st = s.st.lock().unwrap();
                st.last_acked = st.last_acked.max(max_seq);
            }
        }
        for tx in flushes {
            let _ = tx.send(());
        }
    }
}

/// A running subscription. With [`Session::subscribe_stream`] it is also
/// a [`Stream`] of deliveries (`futures_util::StreamExt::next`, or
/// [`recv`](Subscription::recv)). Dropping it does not unsubscribe: call
/// [`unsubscribe`](Subscription::unsubscribe).
pub struct Subscription {
    shared: Arc<SubShared>,
    session: Session,
    pub(crate) rx: Option<mpsc::UnboundedReceiver<Result<Delivery>>>,
}

impl Subscription {
    pub(crate) fn new(shared: Arc<SubShared>, session: Session) -> Subscription {
        Subscription { shared, session, rx: None }
    }

    /// The server's id of the subscription; it changes on reconnect.
    pub fn id(&self) -> Option<String> {
        self.shared.st.lock().unwrap().sid.clone()
    }

    pub fn subject(&self) -> &str {
        &self.shared.subject
    }

    /// The next delivery of a stream subscription; `None` once it ended.
    pub async fn recv(&mut self) -> Option<Result<Delivery>> {
        let item = match &mut self.rx {
            Some(rx) => rx.recv().await,
            None => None,
        };
        self.took(&item);
        item
    }

    fn took(&self, item: &Option<Result<Delivery>>) {
        if let Some(Ok(_)) = item {
            self.shared.dequeued();
        }
    }

    /// How many deliveries of an [`Ack::None`] subscription were dropped
    /// because [`MAX_QUEUED`] were already waiting (0 for an acknowledged
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

    /// Stops deliveries, waits for running handlers, sends their acks, and
    /// ends the subscription on the server.
    pub async fn unsubscribe(&self) -> Result<()> {
        self.shared.stop_and_flush().await;
        let (conn, sid) = {
            let st = self.shared.st.lock().unwrap();
            (st.conn.clone(), st.sid.clone())
        };
        let mut res = Ok(());
        if let (Some(c), Some(sid)) = (conn, sid) {
            if !c.is_dead() {
                res = c.call(obj(json!({"op": "unsubscribe", "sub": sid})), self.session.inner.opts.call_timeout).await.map(|_| ());
            }
        }
        self.shared.end(None);
        res
    }
}

impl Stream for Subscription {
    type Item = Result<Delivery>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = match &mut self.rx {
            Some(rx) => std::task::ready!(rx.poll_recv(cx)),
            None => None,
        };
        self.took(&item);
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_of(opts: SubscribeOptions) -> Map<String, Value> {
        SubShared::new("events.telemetry", opts, SubMode::Stream(Mutex::new(None)), Weak::new()).frame(None)
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
}
