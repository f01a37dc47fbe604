//! The session: a contract negotiated over one WebSocket connection at a
//! time, reconnected with backoff when the connection drops.

use crate::conn::{self, Conn};
use crate::error::{Error, ErrorKind, Result};
use crate::message::{Contract, Decision, Message};
use crate::subscription::{Handler, HandlerError, SubMode, SubShared, SubscribeOptions, Subscription};
use crate::tls::TlsConfig;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, Semaphore};

/// A callback that receives what the session cannot hand to a caller:
/// frames it cannot parse, error frames that answer nothing, connection
/// losses and reconnections that failed, at-most-once deliveries dropped
/// (`DELIVERIES_DROPPED`, see [`MAX_QUEUED`](crate::MAX_QUEUED) and
/// [`MAX_QUEUED_BYTES`](crate::MAX_QUEUED_BYTES)).
pub type ErrorCallback = Arc<dyn Fn(Error) + Send + Sync>;

/// How [`Session::connect`] connects and how the session behaves after.
#[derive(Clone)]
pub struct ConnectOptions {
    /// The session's region (`x-pigeon-region`); default: the server's.
    pub region: Option<String>,
    /// The contract's lifetime (`ttlMs`); default: the server's (15 minutes).
    pub ttl: Option<Duration>,
    /// Send the token as the `pigeon.bearer.<token>` subprotocol instead of
    /// the `Authorization` header (what browsers must do).
    pub subprotocol_auth: bool,
    /// Reconnect after a dropped connection (default true).
    pub reconnect: bool,
    /// How long reconnection keeps trying before the session fails
    /// (default 30 s).
    pub reconnect_window: Duration,
    /// The first and the largest delay between reconnection attempts
    /// (default 100 ms and 5 s, doubling).
    pub backoff: (Duration, Duration),
    /// The interval of keepalive pings; a ping not answered within the
    /// interval drops the connection (default 15 s; `None` disables them).
    pub keepalive: Option<Duration>,
    /// How long a call waits for its answer before it fails with
    /// `REQUEST_TIMEOUT` (default 30 s; `request` adds its own timeout).
    pub call_timeout: Duration,
    /// How long dialing may take (default 10 s).
    pub dial_timeout: Duration,
    /// How many publishes may be in flight at once (default 1024);
    /// `publish_async` waits for room beyond it. A publish is in flight
    /// until its decision or failure, whether or not its
    /// [`PendingPublish`] is still held.
    pub max_pending_publishes: usize,
    /// How many bytes of publishes (encoded messages) may be in flight at
    /// once (default [`DEFAULT_MAX_PENDING_PUBLISH_BYTES`], 16 MiB, as
    /// `MAX_BUFFERED_BYTES` bounds the other calls' frames unsent): a publish that would take them past it fails at once
    /// `RATE_LIMITED` (`details.maxPendingPublishBytes`) and is not sent.
    /// One publish of any size is taken when none is in flight.
    pub max_pending_publish_bytes: usize,
    /// Receives errors no caller can be handed (see [`ErrorCallback`]).
    pub on_error: Option<ErrorCallback>,
    /// How many publish frames may be on the wire unanswered (default 1).
    /// With 1, decisions and sequences follow the order of the calls; more
    /// frames overlap round trips, but the server admits concurrent frames
    /// in any order.
    pub publish_frames_in_flight: usize,
    /// How a `wss://` (or `https://`) URL verifies the server and which
    /// client certificate it presents (mTLS); default: the platform's root
    /// certificates, no client certificate. Unused for `ws://`.
    pub tls: Option<TlsConfig>,
    /// Renew the contract in place (the `renew` op, see
    /// [`Session::renew`]) shortly before it expires (a tenth of its remaining life ahead, at least 5 s) (default true). A renewal that fails is tried again (after a
    /// quarter of what is left, between 100 ms and 5 s) until the contract
    /// expires, each failure handed to `on_error`. Two outcomes stop the
    /// renewals of that contract instead: a refusal the server gives again
    /// whatever the timing ([`FINAL_RENEW_REFUSALS`]: revoked, expired,
    /// stale, …), handed to `on_error` once, saying renewal stopped; and a
    /// renewal that cannot move the expiry (the credential ends first).
    /// Every renewal of one contract the session sends by itself,
    /// whatever became of the last, comes a floor after the last at least:
    /// a quarter of the lifetime the contract was negotiated for, between
    /// 100 ms and 1 s (the lower bound is a quarter of `ttl` when that is
    /// shorter; never taken from renewals): the first renewal of a contract
    /// always comes, one the floor puts past the expiry is not sent
    /// (reported once, `CONTRACT_EXPIRED`), and a retry waits at least the
    /// floor, doubling with each failure in a row (up to 8 times it).
    /// A new contract (reconnect, [`Session::negotiate`])
    /// is renewed in turn; [`close`](Session::close) stops them. Off: the
    /// contract expires after `ttl`, and calls then fail with
    /// `CONTRACT_EXPIRED`.
    pub auto_renew: bool,
    /// The largest message (frame) the client reads, in bytes (default
    /// [`DEFAULT_MAX_FRAME_BYTES`], 64 MiB: above the broker's largest
    /// answers, a replay or receive of up to 16 MiB of messages and one
    /// more). A larger one ends the connection as a lost one
    /// (`SESSION_CLOSED`, kind [`Transport`](ErrorKind::Transport),
    /// `details.maxFrameBytes`), and the session reconnects as after any
    /// loss. 0 is refused (`INVALID_ARGUMENT`).
    pub max_frame_bytes: usize,
}

/// The default of [`ConnectOptions::max_pending_publish_bytes`]: 16 MiB.
pub const DEFAULT_MAX_PENDING_PUBLISH_BYTES: usize = 16 << 20;

/// The default of [`ConnectOptions::max_frame_bytes`]: 64 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 << 20;

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            region: None,
            ttl: None,
            subprotocol_auth: false,
            reconnect: true,
            reconnect_window: Duration::from_secs(30),
            backoff: (Duration::from_millis(100), Duration::from_secs(5)),
            keepalive: Some(Duration::from_secs(15)),
            call_timeout: Duration::from_secs(30),
            dial_timeout: Duration::from_secs(10),
            max_pending_publishes: 1024,
            max_pending_publish_bytes: DEFAULT_MAX_PENDING_PUBLISH_BYTES,
            on_error: None,
            publish_frames_in_flight: 1,
            tls: None,
            auto_renew: true,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        }
    }
}

impl ConnectOptions {
    pub fn region(mut self, r: impl Into<String>) -> Self {
        self.region = Some(r.into());
        self
    }
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    pub fn reconnect(mut self, on: bool) -> Self {
        self.reconnect = on;
        self
    }
    pub fn reconnect_window(mut self, d: Duration) -> Self {
        self.reconnect_window = d;
        self
    }
    pub fn keepalive(mut self, every: Option<Duration>) -> Self {
        self.keepalive = every;
        self
    }
    pub fn call_timeout(mut self, d: Duration) -> Self {
        self.call_timeout = d;
        self
    }
    pub fn subprotocol_auth(mut self, on: bool) -> Self {
        self.subprotocol_auth = on;
        self
    }
    pub fn on_error(mut self, f: impl Fn(Error) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(f));
        self
    }
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Whether the session renews its contract by itself (default true;
    /// see [`ConnectOptions::auto_renew`]).
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }
    /// The bytes of publishes in flight at most (see [`ConnectOptions::max_pending_publish_bytes`]).
    pub fn max_pending_publish_bytes(mut self, n: usize) -> Self {
        self.max_pending_publish_bytes = n;
        self
    }
    /// The largest frame the client reads (see [`ConnectOptions::max_frame_bytes`]).
    pub fn max_frame_bytes(mut self, n: usize) -> Self {
        self.max_frame_bytes = n;
        self
    }
}

/// Options of [`Session::replay`].
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    pub reason: Option<String>,
    pub from_sequence: Option<u64>,
    pub to_sequence: Option<u64>,
    pub max: Option<u32>,
}

pub(crate) enum Phase {
    Up(Arc<Conn>),
    Reconnecting,
    Failed(Error),
    Closed,
}

pub(crate) struct State {
    pub phase: Phase,
    pub contract: Contract,
    /// The lifetime the last negotiation granted (connect, reconnect,
    /// [`Session::negotiate`]), measured from when it was asked: what the
    /// renewal floor is a quarter of ([`renew_floor`]). Never taken from
    /// renewals.
    pub lifetime: Duration,
    pub subs: Vec<Arc<SubShared>>,
}

pub(crate) struct Inner {
    pub url: String,
    pub token: String,
    pub subjects: Vec<String>,
    pub opts: ConnectOptions,
    pub state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// Bumped when the contract changes (connect, reconnect, negotiate,
    /// renew) and when the session closes or fails: wakes the renewer.
    contract_changed: watch::Sender<u64>,
    closing: AtomicBool,
    /// When the connection a reconnect made came up, and the delay that
    /// reconnect had reached: a drop sooner than the largest backoff after
    /// goes on from there, so a server that accepts and drops at once is
    /// not dialled every first backoff forever.
    resume_backoff: Mutex<Option<(Instant, Duration)>>,
    pub_slots: Arc<Semaphore>,
    /// The bytes (encoded messages) of the publishes in flight
    /// ([`ConnectOptions::max_pending_publish_bytes`]).
    pub_bytes: Arc<std::sync::atomic::AtomicUsize>,
}

/// Abandons a subscription whose subscribe did not complete.
struct AbandonOnDrop(Option<Arc<SubShared>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.abandon();
        }
    }
}

/// A Pigeon session over WebSocket: a negotiated contract and the
/// operations it grants.
///
/// **Concurrency.** `Session` is cheap to clone and every method takes
/// `&self`: clones share one connection, and calls from many tasks run
/// concurrently on it (answers are matched by frame id). Publishes are
/// pipelined: whatever is queued while a publish frame is on the wire
/// leaves as one `publish_batch`, and decisions come back in publish order
/// with increasing sequences.
///
/// **Failure.** A call whose connection drops fails with a
/// [`ErrorKind::Transport`] error, never hangs; every call is bounded by
/// `call_timeout`. After a drop the session reconnects with backoff,
/// negotiates a fresh contract and resumes its subscriptions (a pub/sub
/// one from the lowest sequence not yet handled successfully, else after
/// the highest acked, else at the `from` of its latest subscribed answer,
/// else at its original start: see [`Subscription`], "Resuming"); calls
/// made meanwhile wait for it. When the contract cannot be renewed (the
/// token was revoked, the policy no longer permits it) or the reconnect
/// window passes, the session fails: calls and subscriptions end with that
/// error. After [`close`](Session::close) every call fails at once with
/// [`ErrorKind::Closed`].
///
/// **Contract.** The session renews its contract in place before it
/// expires (same id; the subscriptions go on), unless
/// [`ConnectOptions::auto_renew`] is off; see [`renew`](Session::renew).
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<Inner>,
}

/// The answer to come of one [`Session::publish_async`]: a future that
/// resolves exactly once, to the decision, the typed refusal, or a
/// transport error when the connection ends first.
pub struct PendingPublish {
    rx: oneshot::Receiver<Result<Decision>>,
}

impl Future for PendingPublish {
    type Output = Result<Decision>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or_else(|_| Err(Error::transport("SESSION_CLOSED", "the connection ended"))))
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A pull ack or nack frame (op) of message `id` received at sequence
/// `seq` (0: none) under the lease attempt `attempt` (0: none) on
/// `subject`.
fn pull_answer(op: &str, subject: &str, id: &str, seq: u64, attempt: u32) -> Value {
    let mut f = json!({"op": op, "subject": subject, "messageId": id});
    if seq > 0 {
        f["sequence"] = json!(seq);
    }
    if attempt > 0 {
        f["attempt"] = json!(attempt);
    }
    f
}

/// The messages of an `op` (receive, replay) answer `f`, each with the
/// attempt of its lease (0 each when the answer names none): see
/// [`crate::message::pulled`]. A message that does not decode or whose
/// sequence is 0 or absent (see [`crate::message::handed_over`]), or
/// whose attempt is no lease's, is left out and its `BAD_FRAME` handed to
/// `on_error`; the others are returned. An answer whose `messages` are not
/// an array, or whose `attempts` are not an array in step with them, is
/// refused whole, `BAD_FRAME`.
fn messages_of(inner: &Inner, op: &str, f: &Value) -> Result<Vec<(Message, u32)>> {
    let ms: &[Value] = match f.get("messages") {
        Some(Value::Array(a)) => a,
        Some(Value::Null) | None => &[],
        _ => return Err(Error::protocol(format!("{op}: an answer whose messages are not an array"))),
    };
    let attempts = if op == "receive" {
        crate::message::attempts_of(f, ms.len()).map_err(|e| Error::protocol(format!("a receive answer with {e}")))?
    } else {
        None
    };
    Ok(crate::message::pulled(op, op, ms, attempts, |m| crate::message::handed_over(m, true), |e| inner.report(e)))
}

impl Session {
    /// Connects to the server at `url` (`ws://host:port`, `http://host:port`
    /// or the full `/v1/ws` URL; `wss://` and `https://` over TLS, see
    /// [`ConnectOptions::tls`]) with the bearer `token`, and negotiates a
    /// contract on `subjects`. An unknown token fails with
    /// `UNAUTHENTICATED` (status 401); a contract the policy refuses with
    /// its code (`NO_PERMITTED_SUBJECTS`, …). With a client certificate
    /// (mTLS) the token may be empty: none is sent, and the certificate's
    /// SPIFFE ID is the principal. A server certificate that does not
    /// verify fails with `TLS_FAILED` (kind `Transport`, `details.tls`
    /// says why); a client certificate missing or refused with
    /// `UNAUTHENTICATED`.
    pub async fn connect(url: &str, token: &str, subjects: &[&str], opts: ConnectOptions) -> Result<Session> {
        let inner = Arc::new(Inner {
            url: url.to_string(),
            token: token.to_string(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            pub_slots: Arc::new(Semaphore::new(opts.max_pending_publishes.max(1))),
            pub_bytes: Arc::default(),
            opts,
            state: Mutex::new(State {
                phase: Phase::Reconnecting,
                contract: Contract::default(),
                lifetime: Duration::ZERO,
                subs: Vec::new(),
            }),
            changed: watch::channel(0).0,
            contract_changed: watch::channel(0).0,
            closing: AtomicBool::new(false),
            resume_backoff: Mutex::new(None),
        });
        let (conn, contract, lifetime) = inner.open().await?;
        inner.set_up(conn, contract, lifetime);
        if inner.opts.auto_renew {
            tokio::spawn(renew_loop(Arc::downgrade(&inner), inner.contract_changed.subscribe()));
        }
        Ok(Session { inner })
    }

    /// The contract negotiated last.
    pub fn contract(&self) -> Contract {
        self.inner.state.lock().unwrap().contract.clone()
    }

    /// Renews the contract in place (the `renew` op): moves its expiry
    /// later, to `ttl` from now (the server's default lifetime without
    /// one), and keeps its id, subjects and operations, so the running
    /// subscriptions go on and nothing is negotiated or subscribed again.
    /// Returns the renewed contract, which [`contract`](Self::contract)
    /// then gives. The server never takes a contract past the credential
    /// the connection was opened with, and never shortens it: a renewal
    /// that cannot move it answers the same `expires_at`. Refusals:
    /// `CONTRACT_EXPIRED` (an expired contract is not brought back: see
    /// [`negotiate`](Self::negotiate)), `CONTRACT_REVOKED`,
    /// `GRANT_REVOKED`, `CONTRACT_STALE` (a subject's policy changed),
    /// `UNAUTHENTICATED` (the credential has expired), `RATE_LIMITED`,
    /// `INVALID_ARGUMENT`. The session does this by itself unless
    /// [`ConnectOptions::auto_renew`] is off.
    pub async fn renew(&self) -> Result<Contract> {
        self.inner.check_open()?;
        let conn = self.inner.conn().await?;
        self.inner.renew_on(&conn).await
    }

    /// Negotiates a fresh contract (a new id) on the current connection,
    /// for example after `CONTRACT_EXPIRED`; subscriptions keep the
    /// contract they started under.
    pub async fn negotiate(&self) -> Result<Contract> {
        self.inner.check_open()?;
        let conn = self.inner.conn().await?;
        let (c, lifetime) = self.inner.negotiate(&conn).await?;
        {
            let mut st = self.inner.state.lock().unwrap();
            if matches!(&st.phase, Phase::Up(cur) if Arc::ptr_eq(cur, &conn)) {
                st.contract = c.clone();
                st.lifetime = lifetime;
            }
        }
        self.inner.contract_changed.send_modify(|g| *g += 1);
        Ok(c)
    }

    /// Publishes one message and waits for the decision: `accepted` or
    /// `duplicate` with the message id and sequence, or the typed refusal.
    /// A decision that does not read as Go reads one (a member of another
    /// type, a `sequence` spelled `5.0`, a status no broker answers with)
    /// fails `BAD_FRAME` saying that the message may have been accepted:
    /// look it up, or publish again under the same idempotency key.
    pub async fn publish(&self, m: &Message) -> Result<Decision> {
        self.publish_async(m).await?.await
    }

    /// Queues `m` (encoded at once) and returns its [`PendingPublish`]
    /// without waiting for the answer; waits only while
    /// `max_pending_publishes` are in flight, and fails at once
    /// `RATE_LIMITED` (`details.maxPendingPublishBytes`), not sent, when
    /// its encoded size would take the publishes in flight past
    /// `max_pending_publish_bytes` (one of any size is taken when none is
    /// in flight). A publish is in flight from this call until its
    /// decision or failure, whether or not its `PendingPublish` is still
    /// held: dropping it frees nothing. Many publishes in flight share
    /// frames; their decisions keep the order of the calls.
    pub async fn publish_async(&self, m: &Message) -> Result<PendingPublish> {
        self.inner.check_open()?;
        let json = serde_json::to_string(m).map_err(|e| Error::new("ENVELOPE_INVALID", e.to_string()))?;
        // Kept with the publish until its brief answer, which leaves the data out.
        let data = conn::data_span(&json);
        debug_assert_eq!(data.clone().map(|r| &json[r]), (!m.data.is_null()).then(|| m.data.to_string()).as_deref(), "{json}");
        let permit = self.inner.pub_slots.clone().acquire_owned().await.map_err(|_| Error::closed())?;
        let slot = conn::PubSlot::take(permit, &self.inner.pub_bytes, json.len(), self.inner.opts.max_pending_publish_bytes)?;
        let conn = self.inner.conn().await?;
        let rx = conn.publish(json, data, slot)?;
        Ok(PendingPublish { rx })
    }

    /// Publishes `m` as a request on a request/reply subject and waits for
    /// the reply, at most `timeout` (the server answers `REQUEST_TIMEOUT`).
    /// A request without an id, a signature or an idempotency key is sent
    /// with an id drawn here, so that its reply can be checked: an answer
    /// whose message has no `correlationId`, or one naming another request
    /// than the id sent (unless an idempotency key makes it a repeat of an
    /// earlier one), is refused `BAD_FRAME`, never handed over as this
    /// request's reply; so is a reply whose `sequence` is 0 (no broker's;
    /// a reply has none, as it never enters the subject's log).
    pub async fn request(&self, m: &Message, timeout: Duration) -> Result<Message> {
        self.inner.check_open()?;
        let conn = self.inner.conn().await?;
        let req = crate::message::request_of(m);
        let f = json!({"op": "request", "message": &*req, "timeoutMs": crate::time::wire_ms(timeout)});
        let ans = conn.call(obj(f), timeout.saturating_add(Duration::from_secs(2))).await?;
        let reply = crate::message::handed_over(ans.get("message").unwrap_or(&Value::Null), false)
            .map_err(|e| Error::protocol(format!("a reply without a valid message: {e}")))?;
        crate::message::check_reply(&req, &reply).map_err(Error::protocol)?;
        Ok(reply)
    }

    /// Pulls up to `max` messages of `subject`. On a work-queue subject they
    /// are leased for the ack wait: settle each with [`ack`](Self::ack) or
    /// [`nack`](Self::nack). A message of the answer that does not decode
    /// (an entry that is no message object), or whose `sequence` is 0 or
    /// absent (no broker's: it numbers every message it stores from 1, and
    /// an ack naming 0 names none), or whose attempt is no lease's (see
    /// [`receive_attempts`](Self::receive_attempts)), is refused alone:
    /// left out, never answered (the server's ack wait gives it back), and
    /// its `BAD_FRAME` (kind [`Protocol`](ErrorKind::Protocol), naming the
    /// entry) handed to [`on_error`](ConnectOptions::on_error); the others
    /// are returned, as the TypeScript and Python clients and
    /// [`HttpClient::receive`](crate::http::HttpClient::receive) do. An
    /// answer whose `messages` are not an array is refused whole
    /// (`BAD_FRAME`).
    pub async fn receive(&self, subject: &str, max: u32) -> Result<Vec<Message>> {
        Ok(self.receive_attempts(subject, max).await?.into_iter().map(|(m, _)| m).collect())
    }

    /// [`receive`](Self::receive) that also returns, with each message,
    /// the attempt of its lease (1 for its first delivery): send it back
    /// with [`ack_attempt`](Self::ack_attempt) or
    /// [`nack_attempt`](Self::nack_attempt). A lease is held by the
    /// principal, not the session: once the one received runs out, another
    /// session of the same principal may lease the message again, and an
    /// answer naming the older attempt is then refused (`ACK_NOT_ALLOWED`)
    /// instead of settling that session's lease. 0 when nothing is leased
    /// (a pubsub subject) or the server does not tell it. An answer whose
    /// `attempts` is not an array of one per message is refused whole
    /// (`BAD_FRAME`, kind [`Protocol`](ErrorKind::Protocol)), never
    /// matched to the messages otherwise; a message whose attempt is not an
    /// integer of 1 to 2^31-1 ([`MAX_ATTEMPT`](crate::MAX_ATTEMPT)) is
    /// refused alone, as one [`receive`](Self::receive) cannot take: left
    /// out, its `BAD_FRAME` to `on_error`, the others returned each with
    /// its own attempt.
    pub async fn receive_attempts(&self, subject: &str, max: u32) -> Result<Vec<(Message, u32)>> {
        let f = self.call(json!({"op": "receive", "subject": subject, "max": max})).await?;
        messages_of(&self.inner, "receive", &f)
    }

    /// Acknowledges a message taken with `receive`, whichever message holds
    /// the id now; [`ack_sequence`](Self::ack_sequence) names the one
    /// received.
    pub async fn ack(&self, subject: &str, message_id: &str) -> Result<()> {
        self.ack_sequence(subject, message_id, 0).await
    }

    /// Acknowledges the message `message_id` taken with `receive` at
    /// sequence `seq` (its [`Message::sequence`]; 0 names none, as
    /// [`ack`](Self::ack)). A message id names one message at a time only:
    /// once retention trims a message, a newer one may be published under
    /// its id and received by the same consumer. With the sequence, a late
    /// ack never settles (and so loses) the newer message: the server
    /// refuses it (`ACK_NOT_ALLOWED`).
    pub async fn ack_sequence(&self, subject: &str, message_id: &str, seq: u64) -> Result<()> {
        self.ack_attempt(subject, message_id, seq, 0).await
    }

    /// Acknowledges the message `message_id` received at sequence `seq`
    /// under the lease attempt `attempt` that
    /// [`receive_attempts`](Self::receive_attempts) gave it (0 names none,
    /// as [`ack_sequence`](Self::ack_sequence)): once that lease ran out
    /// and the message was leased again, to any session of the principal,
    /// the server refuses it (`ACK_NOT_ALLOWED`) and settles nothing.
    /// An attempt beyond [`MAX_ATTEMPT`](crate::MAX_ATTEMPT) (2^31-1) is
    /// no lease's: `INVALID_ARGUMENT`, nothing sent.
    pub async fn ack_attempt(&self, subject: &str, message_id: &str, seq: u64, attempt: u32) -> Result<()> {
        let attempt = crate::message::sent_attempt(attempt)?;
        self.call(pull_answer("ack", subject, message_id, seq, attempt)).await.map(|_| ())
    }

    /// Gives a message taken with `receive` back, due again after `delay`
    /// (default: the subject's backoff; a longer one than 12 hours, the
    /// most the broker takes, is shortened to it), whichever message
    /// holds the id now; [`nack_sequence`](Self::nack_sequence) names the
    /// one received.
    pub async fn nack(&self, subject: &str, message_id: &str, delay: Option<Duration>) -> Result<()> {
        self.nack_sequence(subject, message_id, 0, delay).await
    }

    /// Gives the message `message_id` taken with `receive` at sequence
    /// `seq` back (see [`ack_sequence`](Self::ack_sequence)): a late nack
    /// never hands out a newer message published under the id.
    pub async fn nack_sequence(&self, subject: &str, message_id: &str, seq: u64, delay: Option<Duration>) -> Result<()> {
        self.nack_attempt(subject, message_id, seq, 0, delay).await
    }

    /// Gives the message `message_id` received at sequence `seq` under
    /// the lease attempt `attempt` back (see
    /// [`ack_attempt`](Self::ack_attempt); 0 names none): a late nack of
    /// an older attempt is refused (`ACK_NOT_ALLOWED`) and does not hand
    /// the message out again while another session runs it.
    /// `INVALID_ARGUMENT` for an attempt beyond 2^31-1, as `ack_attempt`.
    pub async fn nack_attempt(&self, subject: &str, message_id: &str, seq: u64, attempt: u32, delay: Option<Duration>) -> Result<()> {
        let mut f = pull_answer("nack", subject, message_id, seq, crate::message::sent_attempt(attempt)?);
        if let Some(d) = delay {
            f["delayMs"] = json!(crate::time::retry_delay_ms(d));
        }
        self.call(f).await.map(|_| ())
    }

    /// Returns retained messages of `subject` in sequence order.
    /// `REPLAY_DENIED` when the policy refuses it (or wants a reason); a
    /// message of the answer is refused alone, and the answer whole, as
    /// [`receive`](Self::receive) refuses them.
    pub async fn replay(&self, subject: &str, o: ReplayOptions) -> Result<Vec<Message>> {
        let mut f = json!({"op": "replay", "subject": subject});
        if let Some(r) = o.reason {
            f["reason"] = json!(r);
        }
        if let Some(n) = o.from_sequence {
            f["fromSequence"] = json!(n);
        }
        if let Some(n) = o.to_sequence {
            f["toSequence"] = json!(n);
        }
        if let Some(n) = o.max {
            f["max"] = json!(n);
        }
        let f = self.call(f).await?;
        Ok(messages_of(&self.inner, "replay", &f)?.into_iter().map(|(m, _)| m).collect())
    }

    /// An application-level ping; returns the round trip.
    pub async fn ping(&self) -> Result<Duration> {
        let t = Instant::now();
        self.call(json!({"op": "ping"})).await?;
        Ok(t.elapsed())
    }

    async fn call(&self, f: Value) -> Result<Value> {
        self.inner.check_open()?;
        let conn = self.inner.conn().await?;
        conn.call(obj(f), self.inner.opts.call_timeout).await
    }

    /// Subscribes `handler` to `subject`. Each delivery runs the handler
    /// (at most `max_in_flight` at once, started in delivery order):
    /// `Ok(())` acks it, an error (or a panic) nacks that delivery alone,
    /// after the error's retry delay when it gives one. Acks that gather
    /// while one is on the wire leave in one frame. With
    /// `opts.ack(Ack::None)` (at most once, pub/sub) nothing is answered:
    /// a failed delivery is not retried. A handler may unsubscribe its own
    /// subscription or close the session: neither waits for it (see
    /// [`Subscription::unsubscribe`], [`close`](Session::close)). How the
    /// deliveries waiting in the client fare when it ends: see
    /// [`Subscription`].
    pub async fn subscribe<F, Fut>(&self, subject: &str, opts: SubscribeOptions, handler: F) -> Result<Subscription>
    where
        F: Fn(crate::Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        let h: Handler = Arc::new(move |d| Box::pin(handler(d)));
        self.start_sub(subject, opts, SubMode::Handler(h)).await
    }

    /// Subscribes to `subject` as a [`Stream`](futures_util::Stream) of
    /// deliveries (see [`Subscription`]); settle each with
    /// [`Delivery::ack`](crate::Delivery::ack) or `nack` (an
    /// [`Ack::None`](crate::Ack::None) subscription needs neither). The
    /// client takes deliveries ahead of the reader, up to the window (256
    /// by default) unanswered. The stream ends (`None`) after unsubscribe
    /// or close, without handing out what it had buffered; after an `Err`
    /// when the subscription ends with an error. Dropping it unsubscribes;
    /// a delivery dropped unanswered is nacked.
    pub async fn subscribe_stream(&self, subject: &str, opts: SubscribeOptions) -> Result<Subscription> {
        self.start_sub(subject, opts, SubMode::Stream(Mutex::default())).await
    }

    async fn start_sub(&self, subject: &str, opts: SubscribeOptions, mode: SubMode) -> Result<Subscription> {
        self.inner.check_open()?;
        let sub = SubShared::new(subject, opts, mode, Arc::downgrade(&self.inner));
        let conn = self.inner.conn().await?;
        // A caller that gives up (drops this future) leaves no subscription
        // behind, on the client or the server.
        let mut guard = AbandonOnDrop(Some(sub.clone()));
        sub.subscribe_on(&conn, self.inner.opts.call_timeout).await?;
        guard.0 = None;
        {
            let mut st = self.inner.state.lock().unwrap();
            // Closed or failed while it subscribed: close and fail take the
            // subscriptions they end under this lock, after they begin.
            let gone = match &st.phase {
                _ if self.inner.is_closing() => Some(Error::closed()),
                Phase::Failed(e) => Some(e.clone()),
                _ => None,
            };
            if let Some(e) = gone {
                drop(st);
                sub.abandon();
                return Err(e);
            }
            st.subs.push(sub.clone());
        }
        Ok(Subscription::new(sub, self.clone()))
    }

    /// Whether the session is closed or failed for good.
    pub fn is_closed(&self) -> bool {
        matches!(self.inner.state.lock().unwrap().phase, Phase::Closed | Phase::Failed(_))
    }

    /// Waits until the session is closed or has failed for good; returns
    /// the error it failed with (`None` after `close`).
    pub async fn closed(&self) -> Option<Error> {
        let mut rx = self.inner.changed.subscribe();
        loop {
            match &self.inner.state.lock().unwrap().phase {
                Phase::Closed => return None,
                Phase::Failed(e) => return Some(e.clone()),
                _ => {}
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Closes the session: refuses further calls at once and stops the
    /// subscriptions (deliveries not yet handed to a handler or a stream's
    /// reader go back unanswered, see [`Subscription`]); waits, at most
    /// `call_timeout` in all, for running handlers and for the stream
    /// deliveries readers hold to be answered, sends the acks, unsubscribes
    /// each subscription (so the server gives back what it left unanswered
    /// without an attempt spent), then closes the connection. Publishes
    /// not yet answered fail with a transport error: wait for them first.
    ///
    /// It does not wait for what may be the caller's own: called from
    /// inside a handler of the session's, or while a stream's reader holds
    /// deliveries unanswered (that reader may be the caller), it returns
    /// at once and the rest happens in the background; the connection
    /// closes once that handler has returned and those deliveries are
    /// answered or dropped (at most `call_timeout`). Wait for it with
    /// [`closed`](Session::closed).
    ///
    /// A second `close` while one runs waits for it to end (except from
    /// inside a handler, where it returns at once).
    pub async fn close(&self) -> Result<()> {
        if self.inner.closing.swap(true, Ordering::AcqRel) {
            // A close runs: wait for it to end (it is bounded by
            // call_timeout and the close frame's wait), unless called from a
            // handler, which that close may be waiting for.
            if !SubShared::in_any_handler() {
                let bound = self.inner.opts.call_timeout.saturating_add(Duration::from_secs(3));
                let _ = tokio::time::timeout(bound, self.closed()).await;
            }
            return Ok(());
        }
        self.inner.contract_changed.send_modify(|g| *g += 1); // stops the renewer
        let subs = std::mem::take(&mut self.inner.state.lock().unwrap().subs);
        // Each with whether this close stopped it (else an unsubscribe is ending it).
        let subs: Vec<(Arc<SubShared>, bool)> = subs.into_iter().map(|s| (s.clone(), !s.stop())).collect();
        let detach = subs.iter().any(|(s, _)| s.in_own_handler() || s.held_count() > 0);
        let inner = self.inner.clone();
        // In a task of its own, waited for unless detached: a caller that
        // gives up (a timeout around close, a dropped future) does not
        // leave the session closing for ever, its connection open and
        // `closed()` waiting without end.
        let finish = tokio::spawn(inner.finish_close(subs));
        if !detach {
            if let Err(e) = finish.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        Ok(())
    }
}

impl Inner {
    /// The rest of [`Session::close`], once the subscriptions are stopped.
    async fn finish_close(self: Arc<Self>, subs: Vec<(Arc<SubShared>, bool)>) {
        let timeout = self.opts.call_timeout;
        let _ = tokio::time::timeout(timeout, async {
            for (s, ours) in &subs {
                if *ours {
                    let _ = s.finish(timeout).await;
                } else {
                    s.wait_done().await;
                }
            }
        })
        .await;
        let conn = {
            let mut st = self.state.lock().unwrap();
            let old = std::mem::replace(&mut st.phase, Phase::Closed);
            match old {
                Phase::Up(c) => Some(c),
                _ => None,
            }
        };
        self.changed.send_modify(|g| *g += 1);
        for (s, _) in &subs {
            s.end(None);
        }
        if let Some(c) = conn {
            c.close();
            let _ = tokio::time::timeout(Duration::from_secs(2), c.wait_done()).await;
        }
    }
}

impl Drop for Inner {
    /// A session dropped without `close` still closes its connection.
    fn drop(&mut self) {
        if let Ok(st) = self.state.get_mut() {
            if let Phase::Up(c) = &st.phase {
                c.close();
            }
        }
    }
}

impl Inner {
    /// Hands `e` to `on_error`. A callback that panics loses that one
    /// report, not the task that reported it (the connection's reader, a
    /// reconnect, the renewer): that would leave the session neither up
    /// nor failed.
    pub(crate) fn report(&self, e: Error) {
        if let Some(cb) = &self.opts.on_error {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(e)));
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closing.load(Ordering::Acquire) {
            return Err(Error::closed());
        }
        Ok(())
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// The current connection; waits while the session reconnects.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>> {
        let mut rx = self.changed.subscribe();
        loop {
            {
                let st = self.state.lock().unwrap();
                match &st.phase {
                    Phase::Up(c) if !c.is_dead() => return Ok(c.clone()),
                    Phase::Up(_) | Phase::Reconnecting => {}
                    Phase::Failed(e) => return Err(e.clone()),
                    Phase::Closed => return Err(Error::closed()),
                }
            }
            let wait = self.opts.reconnect_window + self.opts.dial_timeout;
            match tokio::time::timeout(wait, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(Error::transport("SESSION_CLOSED", "the connection is down")),
            }
        }
    }

    /// Negotiates a contract on `conn`; with it, the lifetime it was
    /// granted for, from when it was asked (zero without an expiry).
    async fn negotiate(&self, conn: &Conn) -> Result<(Contract, Duration)> {
        let mut f = json!({"op": "negotiate", "subjects": self.subjects});
        if let Some(t) = self.opts.ttl {
            f["ttlMs"] = json!(crate::time::wire_ms(t));
        }
        let asked = crate::time::now_ms();
        let k = self.contract_call(conn, f).await?;
        let lifetime = k.expires_at_ms().map_or(Duration::ZERO, |e| Duration::from_millis((e - asked).max(0) as u64));
        Ok((k, lifetime))
    }

    /// Sends `negotiate` or `renew` and reads the `contract` answer.
    async fn contract_call(&self, conn: &Conn, f: Value) -> Result<Contract> {
        let ans = conn.call(obj(f), self.opts.call_timeout).await?;
        if let Some(n) = ans.get("maxFrame").and_then(Value::as_u64) {
            conn.max_frame.store(n, Ordering::Relaxed);
        }
        serde_json::from_value(ans.get("contract").cloned().unwrap_or(Value::Null))
            .map_err(|e| Error::protocol(format!("a contract answer without a valid contract: {e}")))
    }

    /// Renews the contract in force on `conn` (the `renew` op) and makes
    /// the answer the session's contract while `conn` is still its
    /// connection and the contract still the one renewed.
    async fn renew_on(&self, conn: &Arc<Conn>) -> Result<Contract> {
        let mut f = json!({"op": "renew"});
        if let Some(t) = self.opts.ttl {
            f["ttlMs"] = json!(crate::time::wire_ms(t));
        }
        let k = self.contract_call(conn, f).await?;
        let updated = {
            let mut st = self.state.lock().unwrap();
            let ours = matches!(&st.phase, Phase::Up(cur) if Arc::ptr_eq(cur, conn)) && st.contract.id == k.id;
            if ours {
                st.contract = k.clone();
            }
            ours
        };
        if updated {
            self.contract_changed.send_modify(|g| *g += 1);
        }
        Ok(k)
    }

    /// The connection when the session is up on it, without waiting.
    fn up_conn(&self) -> Option<Arc<Conn>> {
        match &self.state.lock().unwrap().phase {
            Phase::Up(c) if !c.is_dead() => Some(c.clone()),
            _ => None,
        }
    }

    /// Whether the session is closing, closed or failed for good.
    fn is_over(&self) -> bool {
        self.is_closing() || matches!(self.state.lock().unwrap().phase, Phase::Closed | Phase::Failed(_))
    }

    /// Dials and negotiates.
    async fn open(self: &Arc<Self>) -> Result<(Arc<Conn>, Contract, Duration)> {
        let conn = Conn::dial(self).await?;
        match self.negotiate(&conn).await {
            Ok((c, lifetime)) => Ok((conn, c, lifetime)),
            Err(e) => {
                conn.close();
                Err(e)
            }
        }
    }

    fn set_up(self: &Arc<Self>, conn: Arc<Conn>, contract: Contract, lifetime: Duration) {
        {
            let mut st = self.state.lock().unwrap();
            st.phase = Phase::Up(conn.clone());
            st.contract = contract;
            st.lifetime = lifetime;
        }
        self.changed.send_modify(|g| *g += 1);
        self.contract_changed.send_modify(|g| *g += 1);
        if conn.is_dead() {
            // Lost between its contract and now (a server going down as it
            // answered): its reader's conn_lost came while it was not yet
            // the session's connection, and was ignored. Lose it again now
            // that it is, or the session would wait on it for ever.
            self.conn_lost(&conn, conn.failed());
            return;
        }
        if let Some(every) = self.opts.keepalive {
            let weak = Arc::downgrade(&conn);
            let timeout = self.opts.call_timeout.min(every);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(c) = weak.upgrade() else { return };
                    if c.is_dead() {
                        return;
                    }
                    if let Err(e) = c.call(obj(json!({"op": "ping"})), timeout).await {
                        if e.kind == ErrorKind::Timeout {
                            c.kill("no answer to a keepalive ping");
                        }
                        return;
                    }
                }
            });
        }
    }

    /// Called by a connection's reader when it ends.
    pub(crate) fn conn_lost(self: &Arc<Self>, conn: &Arc<Conn>, err: Error) {
        let reconnect = {
            let mut st = self.state.lock().unwrap();
            match &st.phase {
                Phase::Up(c) if Arc::ptr_eq(c, conn) => {}
                _ => return,
            }
            if self.is_closing() {
                return;
            }
            if self.opts.reconnect {
                st.phase = Phase::Reconnecting;
                true
            } else {
                st.phase = Phase::Failed(err.clone());
                false
            }
        };
        self.changed.send_modify(|g| *g += 1);
        self.report(err.clone());
        if reconnect {
            let inner = self.clone();
            tokio::spawn(async move { inner.reconnect(err).await });
        } else {
            self.fail(err);
        }
    }

    fn fail(&self, err: Error) {
        let subs = {
            let mut st = self.state.lock().unwrap();
            if !matches!(st.phase, Phase::Closed) {
                st.phase = Phase::Failed(err.clone());
            }
            std::mem::take(&mut st.subs)
        };
        self.changed.send_modify(|g| *g += 1);
        self.contract_changed.send_modify(|g| *g += 1);
        for s in subs {
            s.end(Some(err.clone()));
        }
    }

    async fn reconnect(self: Arc<Self>, first: Error) {
        let start = Instant::now();
        let (first_delay, max) = self.opts.backoff;
        // A backoff of zero (set as a field) would dial without pause.
        let (mut delay, max) = (first_delay.max(MIN_BACKOFF), max.max(MIN_BACKOFF));
        if let Some((up_at, reached)) = *self.resume_backoff.lock().unwrap() {
            if up_at.elapsed() < max {
                delay = reached;
            }
        }
        let mut last = first;
        loop {
            if self.is_closing() {
                return;
            }
            if start.elapsed() >= self.opts.reconnect_window {
                let mut e =
                    Error::transport(&last.code, format!("reconnecting gave up after {:?}: {}", self.opts.reconnect_window, last.message));
                e.details = last.details.clone();
                self.report(e.clone());
                self.fail(e);
                return;
            }
            tokio::time::sleep(delay).await;
            delay = delay.saturating_mul(2).min(max);
            match self.open().await {
                Ok((conn, contract, lifetime)) => {
                    if self.is_closing() {
                        conn.close();
                        return;
                    }
                    self.set_up(conn.clone(), contract, lifetime);
                    *self.resume_backoff.lock().unwrap() = Some((Instant::now(), delay));
                    let subs = self.state.lock().unwrap().subs.clone();
                    for s in subs {
                        if let Err(e) = s.resubscribe(&conn, self.opts.call_timeout).await {
                            if e.kind == ErrorKind::Transport {
                                break; // the new connection dropped too: its loss reconnects again
                            }
                            self.state.lock().unwrap().subs.retain(|x| !Arc::ptr_eq(x, &s));
                            s.end(Some(e));
                        }
                    }
                    return;
                }
                Err(e) if e.kind == ErrorKind::Transport => last = e,
                Err(e) => {
                    // The contract can no longer be had: fail, never hang.
                    self.report(e.clone());
                    self.fail(e);
                    return;
                }
            }
        }
    }

    pub(crate) fn remove_sub(&self, s: &Arc<SubShared>) {
        self.state.lock().unwrap().subs.retain(|x| !Arc::ptr_eq(x, s));
    }
}

/// The shortest pause between two reconnection attempts, whatever
/// [`ConnectOptions::backoff`] says.
const MIN_BACKOFF: Duration = Duration::from_millis(10);

/// The smallest and the largest delay before a failed renewal is tried again.
const RENEW_RETRY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// The codes of a renewal refusal that the server gives again for the same
/// contract however often it is asked (the contract is revoked, expired,
/// unknown, another principal's or stale; the grant it relied on is
/// revoked; the credential has expired): automatic renewal stops for that
/// contract rather than sending a `renew` frame, audited `contract.denied`
/// and counted toward the negotiation rate, every few seconds until it
/// expires. Any other failure (`RATE_LIMITED`, `INTERNAL`, a timeout, a
/// lost connection, …) is tried again.
pub const FINAL_RENEW_REFUSALS: &[&str] = &[
    "CONTRACT_REVOKED",
    "CONTRACT_EXPIRED",
    "CONTRACT_NOT_FOUND",
    "CONTRACT_PRINCIPAL_MISMATCH",
    "CONTRACT_STALE",
    "GRANT_REVOKED",
    "UNAUTHENTICATED",
];

/// Renews the session's contract shortly before it expires (a tenth of its remaining life ahead, at least 5 s) ([`ConnectOptions::auto_renew`]), until the session closes,
/// fails or is dropped: it holds the session only weakly, and `changed`
/// (the session's `contract_changed`) wakes it when the contract changes
/// and when the session ends. After a failure it tries again after a
/// quarter of what is left (between 100 ms and 5 s, and at least the
/// floor, [`renew_floor`], doubling with each failure in a row up to 8
/// times it) until the contract expires; every renewal of one contract it
/// sends is the floor after the last at least, and one the floor puts past
/// the expiry is not sent (reported once); a refusal of
/// [`FINAL_RENEW_REFUSALS`], or a renewal that
/// cannot move the expiry (the credential ends first), stops the renewals
/// of that contract. It then waits for a new contract (a reconnect,
/// [`Session::negotiate`]).
async fn renew_loop(session: Weak<Inner>, mut changed: watch::Receiver<u64>) {
    // A contract (id, expiry) not renewed again: a renewal could not move
    // its expiry, or was refused for good.
    let mut stuck: Option<(String, i64)> = None;
    // After a failure: when to try again, and how many failed in a row.
    let mut retry: Option<Duration> = None;
    let mut fails = 0u32;
    // The contract the loop last sent a renewal of (its id) and when,
    // whatever became of it: renewals of one contract are at least `floor`
    // apart, whatever expiry the server grants (a renewal a few ms long
    // would be renewed every few ms) and however fast it fails them.
    let mut last: Option<(String, Instant)> = None;
    loop {
        let (id, exp, floor) = {
            let Some(inner) = session.upgrade() else { return };
            changed.borrow_and_update();
            if inner.is_over() {
                return;
            }
            let st = inner.state.lock().unwrap();
            (st.contract.id.clone(), st.contract.expires_at_ms(), renew_floor(st.lifetime, inner.opts.ttl))
        };
        let left = exp.map(|e| e - crate::time::now_ms());
        let mut wait = match (exp, left) {
            (Some(e), Some(left)) if left > 0 && stuck != Some((id.clone(), e)) => {
                let left = Duration::from_millis(left as u64);
                Some(match retry.take() {
                    Some(r) => r.min(left),
                    None => left - renew_lead(left),
                })
            }
            _ => None, // expired, unknown, or renewed as far as it goes: wait for a new contract
        };
        // The floor: the first renewal of a contract always comes; a later
        // one waits until `floor` after the last, and one the floor puts
        // past the expiry is not sent (reported once): the contract ends.
        let since = last.as_ref().filter(|(lid, _)| *lid == id).map(|(_, at)| at.elapsed());
        if let (Some(w), Some(since), Some(e)) = (wait, since, exp) {
            if since + w < floor {
                let left = Duration::from_millis((e - crate::time::now_ms()).max(0) as u64);
                if floor - since >= left {
                    wait = None;
                    stuck = Some((id.clone(), e));
                    retry = None;
                    if let Some(inner) = session.upgrade() {
                        inner.report(Error::new(
                            "CONTRACT_EXPIRED",
                            format!(
                                "the contract expires in {left:?}, before its next renewal may come ({floor:?} after the last): renewal stopped for this contract"
                            ),
                        ));
                    }
                } else {
                    wait = Some(floor - since);
                }
            }
        }
        match wait {
            None => {
                retry = None;
                if changed.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Some(w) => {
                tokio::select! {
                    r = changed.changed() => {
                        if r.is_err() {
                            return;
                        }
                        continue;
                    }
                    _ = tokio::time::sleep(w) => {}
                }
            }
        }
        let Some(exp) = exp else { continue };
        let Some(inner) = session.upgrade() else { return };
        if inner.is_over() {
            return;
        }
        if inner.state.lock().unwrap().contract.expires_at_ms() != Some(exp) || crate::time::now_ms() >= exp {
            continue; // renewed or replaced meanwhile, or expired
        }
        last = Some((id.clone(), Instant::now()));
        let res = match inner.up_conn() {
            Some(conn) => inner.renew_on(&conn).await,
            None => Err(Error::transport("SESSION_CLOSED", "the connection is down")),
        };
        match res {
            Ok(k) => {
                fails = 0;
                if k.expires_at_ms().is_none_or(|e| e <= exp) {
                    stuck = Some((id, exp));
                }
            }
            Err(_) if inner.is_over() => return,
            Err(mut e) if FINAL_RENEW_REFUSALS.contains(&e.code.as_str()) => {
                stuck = Some((id, exp));
                e.message = format!("renewing the contract failed (renewal stopped for this contract): {}", e.message);
                inner.report(e);
            }
            Err(e) => {
                let left = Duration::from_millis((exp - crate::time::now_ms()).max(0) as u64);
                // Backing off: never sooner than the floor, doubling with
                // each failure in a row.
                fails = fails.saturating_add(1);
                let backoff = floor.saturating_mul(1 << (fails - 1).min(3));
                retry = Some((left / 4).clamp(RENEW_RETRY.0, RENEW_RETRY.1).max(backoff));
                let mut e = e;
                e.message = format!("renewing the contract failed (trying again): {}", e.message);
                inner.report(e);
            }
        }
    }
}

/// The bounds of the floor between two automatic renewals of one contract
/// ([`renew_floor`]).
const MAX_RENEW_FLOOR: Duration = Duration::from_secs(1);
const MIN_RENEW_FLOOR: Duration = Duration::from_millis(100);

/// The least time between two renewals of one contract that the session
/// sends by itself (retries included), as in the Go client: a quarter of
/// the lifetime the last negotiation granted (`life`, measured from when it
/// was asked), or of the lifetime the session asks for (`ttl`) when that is
/// shorter, so that each is renewed (at half its life) before it expires,
/// within [`MIN_RENEW_FLOOR`, `MAX_RENEW_FLOOR`]. The lower bound is a
/// quarter of `ttl` when that is shorter: the session's own choice. Never
/// taken from renewals: a server that grants ever shorter renewals, or
/// fails them at once, cannot drive the session faster than one renewal
/// per `MIN_RENEW_FLOOR`.
fn renew_floor(life: Duration, ttl: Option<Duration>) -> Duration {
    let (mut life, mut lower) = (life, MIN_RENEW_FLOOR);
    if let Some(t) = ttl.filter(|t| !t.is_zero()) {
        life = life.min(t);
        lower = lower.min(t / 4);
    }
    (life / 4).max(lower).min(MAX_RENEW_FLOOR)
}

/// How long before a contract's expiry a session renews it, for `left` of
/// remaining life: a tenth of it, but at least 5 s (half of it for less
/// than 10 s), so that a short contract leaves room for a slow answer.
fn renew_lead(left: Duration) -> Duration {
    (left / 10).max((left / 2).min(Duration::from_secs(5)))
}
