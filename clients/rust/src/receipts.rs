//! Who was handed a message, and when: `GET /v1/audit/receipts/{id}`
//! (docs/http.md; role auditor), a page at a time ([`HttpClient::receipts`])
//! or every page through each page's `next` ([`HttpClient::receipt_pages`],
//! [`HttpClient::all_receipts`]).
//!
//! An answer is taken only as the route gives it, else `BAD_FRAME`
//! ([`ErrorKind::Protocol`](crate::ErrorKind::Protocol)), never guessed: a
//! `receipts` array of receipts of the route's fields and types (an
//! `auditSeq` of 1 to 2^64-1, a `seq` of 0 to 2^64-1, a `time` in RFC
//! 3339), in the order of their places (`auditSeq`, then `seq`), each past
//! the cursor asked after, and at most as many as asked for; a `next` that
//! is a cursor (`AUDITSEQ:SEQ`, or `AUDITSEQ` alone: decimal digits, each
//! number at most 2^64-1) not before the page's last receipt, on a page
//! holding one. So the pages a server answers move forward: one that
//! repeats a cursor or goes back ends the reading with an error, and a
//! hostile server cannot keep a reader asking for one page for ever.

use crate::conn::Listing;
use crate::error::{Error, Result};
use crate::http::{encode_segment, malformed, member, segment, HttpClient};
use serde_json::Value;
use std::time::Duration;

/// The most receipts a page holds, the server's default and cap of `max`
/// (10,000; `maxRecords` in server/routes.go): an answer listing more is
/// refused `BAD_FRAME` without building the receipts past it.
pub const MAX_RECEIPTS_PAGE: u32 = 10_000;

/// The most times [`ReceiptPages::next_page`] (and so
/// [`HttpClient::all_receipts`]) waits out a 429 for one page (5): the next
/// 429 for that page is returned.
pub const RECEIPTS_RETRIES: u32 = 5;

/// The longest [`ReceiptPages::next_page`] waits on one 429 (30 s): a
/// longer `Retry-After` is waited this long, then the page asked again.
pub const RECEIPTS_MAX_WAIT: Duration = Duration::from_secs(30);

/// How long to wait before asking again after the 429 `e`: `told`, the
/// answer's `Retry-After`, else the error's `details.retryAfterMs` (the
/// broker sends both), else 1 s; at most [`RECEIPTS_MAX_WAIT`].
fn retry_wait(e: &Error, told: Option<Duration>) -> Duration {
    let wait = told
        .or_else(|| {
            e.details.get("retryAfterMs").and_then(Value::as_f64).filter(|ms| *ms >= 0.0).map(|ms| Duration::from_millis(ms as u64))
        })
        .unwrap_or(Duration::from_secs(1));
    wait.min(RECEIPTS_MAX_WAIT)
}

/// The most receipts [`HttpClient::all_receipts`] gathers by default
/// (100,000, ten full pages; the Go CLI's `audit receipts` reads as many at
/// most): past it the call fails `RECEIPTS_TRUNCATED`
/// ([`ErrorKind::Truncated`](crate::ErrorKind::Truncated)) rather than hold
/// what a server sends for as long as it sends. Raise it with
/// [`HttpClient::with_all_receipts_max`], or read page by page with
/// [`HttpClient::receipt_pages`].
pub const MAX_ALL_RECEIPTS: usize = 100_000;

/// One receipt of a message: a delivery, acknowledgement, nack,
/// exhaustion, replay or reply of it that the audit log records
/// (`GET /v1/audit/receipts/{id}`). Absent fields are empty (`ref_`,
/// `subject`) or 0 (`seq`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Receipt {
    /// What happened: `delivery.dispatched`, `replay.executed`,
    /// `reply.delivered`, … (non-empty).
    pub event: String,
    /// When, in RFC 3339 as the server writes it (see [`time_ms`](Receipt::time_ms)).
    pub time: String,
    /// Who was handed the message (or answered it).
    pub principal: String,
    /// The contract it acted under.
    pub contract_id: String,
    /// `ref`: the subscription; empty for a pull receive; the reason given
    /// for a replay (`replay.executed`); the request's id for a reply
    /// (`reply.delivered`).
    pub ref_: String,
    /// The audit record's place in the chain (1 to 2^64-1).
    pub audit_seq: u64,
    /// The subject of the message received (empty when not told).
    pub subject: String,
    /// The sequence of the message received: one id can name two messages
    /// over time, once the first is trimmed (0: unknown).
    pub seq: u64,
}

impl Receipt {
    /// The receipt's place as a page's `next` names it (`AUDITSEQ:SEQ`):
    /// pass it as `after` for the receipts past it.
    pub fn cursor(&self) -> String {
        format!("{}:{}", self.audit_seq, self.seq)
    }

    /// [`time`](Receipt::time) in milliseconds since the Unix epoch
    /// (`None` only for a receipt not read from an answer: the time of
    /// each one read is checked).
    pub fn time_ms(&self) -> Option<i64> {
        crate::time::parse_rfc3339_ms(&self.time)
    }

    fn place(&self) -> Cursor {
        (self.audit_seq, self.seq)
    }
}

/// A page of receipts: `next`, when the server recorded more than the page
/// holds, names the rest (pass it as `after`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReceiptsPage {
    pub receipts: Vec<Receipt>,
    pub next: Option<String>,
}

/// A receipt's place: its audit sequence, then its message sequence.
type Cursor = (u64, u64);

/// Reads a cursor as the server writes and reads one (`ParseReceiptCursor`):
/// `AUDITSEQ:SEQ`, or `AUDITSEQ` alone, the place past every receipt of that
/// record; each number decimal digits alone (no sign, no space), at most
/// 2^64-1. The empty text is the place before every receipt.
fn parse_cursor(s: &str) -> Option<Cursor> {
    fn decimal(s: &str) -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    }
    if s.is_empty() {
        return Some((0, 0));
    }
    match s.split_once(':') {
        Some((audit, seq)) => Some((decimal(audit)?, decimal(seq)?)),
        None => Some((decimal(s)?, u64::MAX)),
    }
}

/// The receipt `v`: an object with a non-empty string `event`, an RFC 3339
/// string `time`, string `principal` and `contractId`, an `auditSeq` of 1
/// to 2^64-1; `ref` and `subject`, when present, strings, and `seq` an
/// integer of 0 to 2^64-1. Other members are left alone.
fn receipt_of(v: &Value) -> std::result::Result<Receipt, String> {
    let text = |name: &str| -> std::result::Result<String, String> {
        member(v, name)?.as_str().map(str::to_string).ok_or_else(|| format!("a {name} that is not a string"))
    };
    let optional_text = |name: &str| -> std::result::Result<String, String> {
        match v.get(name) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("a {name} that is not a string")),
        }
    };
    let event = text("event")?;
    if event.is_empty() {
        return Err("an empty event".into());
    }
    let time = text("time")?;
    if crate::time::parse_rfc3339_ms(&time).is_none() {
        return Err(format!("a time that is not RFC 3339 ({:?})", time.chars().take(64).collect::<String>()));
    }
    // as_u64 is None for a float (1.0, 1e2, and integers past 2^64, which
    // serde_json reads as floats), a negative integer and a non-number.
    let audit_seq = member(v, "auditSeq")?.as_u64().filter(|&n| n > 0).ok_or("an auditSeq that is not an integer of 1 to 2^64-1")?;
    let seq = match v.get("seq") {
        None => 0,
        Some(n) => n.as_u64().ok_or("a seq that is not an integer of 0 to 2^64-1")?,
    };
    Ok(Receipt {
        event,
        time,
        principal: text("principal")?,
        contract_id: text("contractId")?,
        ref_: optional_text("ref")?,
        audit_seq,
        subject: optional_text("subject")?,
        seq,
    })
}

/// The page of an answer to a call after `after` for at most `most`
/// receipts (see the module's documentation for what is refused).
fn page_of(v: &Value, after: Cursor, most: u32) -> std::result::Result<ReceiptsPage, String> {
    let Value::Array(a) = member(v, "receipts")? else {
        return Err("receipts that are not an array".into());
    };
    if a.len() > most as usize {
        return Err(format!("{} receipts, more than the {most} asked for", a.len()));
    }
    let mut receipts = Vec::with_capacity(a.len());
    let mut last = after;
    for (i, r) in a.iter().enumerate() {
        let r = receipt_of(r).map_err(|e| format!("receipts[{i}]: {e}"))?;
        // Strictly past the one before (and the first past the cursor
        // asked after): no receipt twice, none of a page already read.
        if r.place() <= last {
            return Err(format!(
                "receipts[{i}] at {} that is not past {}:{} (a receipt repeated, out of order, or not after the cursor asked)",
                r.cursor(),
                last.0,
                last.1
            ));
        }
        last = r.place();
        receipts.push(r);
    }
    let next = match v.get("next") {
        None => None,
        Some(Value::String(n)) => {
            let c = parse_cursor(n).filter(|_| !n.is_empty()).ok_or_else(|| {
                format!("a next that is not a cursor, AUDITSEQ[:SEQ] in decimal ({:?})", n.chars().take(64).collect::<String>())
            })?;
            if receipts.is_empty() {
                return Err("a next on a page without receipts".into());
            }
            // Not before the last receipt: the next page would repeat it.
            if c < last {
                return Err(format!("a next ({n}) before the page's last receipt ({}:{})", last.0, last.1));
            }
            Some(n.clone())
        }
        Some(_) => return Err("a next that is not a string".into()),
    };
    Ok(ReceiptsPage { receipts, next })
}

/// Whether a page's `next` moves past the cursor it was asked after: the
/// pages of [`ReceiptPages`] stop with an error on one that does not.
fn moves_on(after: Cursor, next: Cursor) -> bool {
    next > after
}

impl HttpClient {
    /// A page of the receipts of message `message_id` (`GET
    /// /v1/audit/receipts/{id}`, role auditor; the id percent-encoded, so
    /// it may hold `/`, `?`, `#` or spaces; `""`, `.` and `..` are refused
    /// `INVALID_ARGUMENT`, nothing sent): at most `max` of them (`None` or
    /// 0: the server's default and cap, [`MAX_RECEIPTS_PAGE`]), past the
    /// cursor `after` (a page's `next`, or an audit sequence alone for the
    /// receipts of later records; `None`: from the first), in the order of
    /// the audit log. An `after` that is not a cursor is sent as given, and
    /// the server refuses it `BAD_REQUEST` (400). The server's refusals as
    /// typed errors: `FORBIDDEN` (403) for a principal that is not an
    /// auditor, `RATE_LIMITED` (429, `Retry-After: 1`) while it reads the
    /// log for two other such requests, or for this principal's one
    /// before: this call does not wait it out (one request, the caller's
    /// to retry); [`receipt_pages`](HttpClient::receipt_pages) and
    /// [`all_receipts`](HttpClient::all_receipts) do. `BAD_FRAME` for an
    /// answer not of the route's shape (see the module's documentation).
    pub async fn receipts(&self, message_id: &str, after: Option<&str>, max: Option<u32>) -> Result<ReceiptsPage> {
        self.receipts_told(message_id, after, max, &mut None).await
    }

    /// [`receipts`](HttpClient::receipts), setting `told` to a 429's
    /// `Retry-After`.
    async fn receipts_told(
        &self,
        message_id: &str,
        after: Option<&str>,
        max: Option<u32>,
        told: &mut Option<Duration>,
    ) -> Result<ReceiptsPage> {
        let mut path = format!("/v1/audit/receipts/{}", segment(message_id)?);
        let mut query = Vec::new();
        if let Some(n) = max.filter(|&n| n > 0) {
            query.push(format!("max={n}"));
        }
        if let Some(a) = after.filter(|a| !a.is_empty()) {
            query.push(format!("after={}", encode_segment(a)));
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let (_, v) = self.get_listing(&path, Listing { member: "receipts", most: MAX_RECEIPTS_PAGE as usize }, told).await?;
        // An after the server takes is a cursor; one that is not, it
        // refuses (its receipts are then not checked against it).
        let after = after.and_then(parse_cursor).unwrap_or((0, 0));
        let most = max.filter(|n| (1..=MAX_RECEIPTS_PAGE).contains(n)).unwrap_or(MAX_RECEIPTS_PAGE);
        page_of(&v, after, most).map_err(|e| malformed("GET", &path, e))
    }

    /// Every page of the receipts of `message_id`, each of at most `max`
    /// (see [`receipts`](HttpClient::receipts)), read on
    /// [`ReceiptPages::next_page`] through each page's `next`.
    pub fn receipt_pages(&self, message_id: &str, max: Option<u32>) -> ReceiptPages {
        ReceiptPages { http: self.clone(), id: message_id.to_string(), max, after: None, failed: None, done: false }
    }

    /// Every receipt of `message_id`, read page by page (each of at most
    /// `max`) through [`receipt_pages`](HttpClient::receipt_pages), which
    /// waits out a 429: the first error of a page ends it. At most
    /// [`with_all_receipts_max`](HttpClient::with_all_receipts_max) of them
    /// ([`MAX_ALL_RECEIPTS`] by default): when more are recorded the call
    /// fails `RECEIPTS_TRUNCATED` ([`ErrorKind::Truncated`](crate::ErrorKind::Truncated),
    /// not a malformed answer), `details.max` the bound and `details.next`
    /// the cursor of the last receipt within it: pass it as `after` to
    /// [`receipts`](HttpClient::receipts) to read on from there, page by
    /// page.
    pub async fn all_receipts(&self, message_id: &str, max: Option<u32>) -> Result<Vec<Receipt>> {
        let most = self.all_receipts_max;
        let mut pages = self.receipt_pages(message_id, max);
        let mut all = Vec::new();
        while let Some(p) = pages.next_page().await? {
            all.extend(p.receipts);
            if all.len() > most {
                let mut details = serde_json::Map::new();
                details.insert("max".into(), most.into());
                if let Some(last) = most.checked_sub(1).map(|i| &all[i]) {
                    details.insert("next".into(), last.cursor().into());
                }
                return Err(Error::with_details(
                    "RECEIPTS_TRUNCATED",
                    format!(
                        "GET /v1/audit/receipts/{}: more than {most} receipts are recorded, the most all_receipts gathers \
                         (with_all_receipts_max; read on page by page after details.next)",
                        encode_segment(message_id)
                    ),
                    details,
                ));
            }
        }
        Ok(all)
    }
}

/// The pages of the receipts of a message, read one at a time through each
/// page's `next` ([`HttpClient::receipt_pages`]).
///
/// ```no_run
/// # async fn run() -> pigeon_client::Result<()> {
/// use pigeon_client::http::HttpClient;
/// let http = HttpClient::new("http://127.0.0.1:8787", "auditor-token");
/// let mut pages = http.receipt_pages("msg_1", None);
/// while let Some(page) = pages.next_page().await? {
///     for r in page.receipts {
///         println!("{} {} {} (contract {})", r.time, r.event, r.principal, r.contract_id);
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct ReceiptPages {
    http: HttpClient,
    id: String,
    max: Option<u32>,
    /// The `next` of the last page read (`None` before the first).
    after: Option<String>,
    /// The protocol error that ended the pages, returned again.
    failed: Option<Error>,
    done: bool,
}

impl ReceiptPages {
    /// The next page, `None` once a page without `next` was read. A page
    /// whose `next` does not move past the cursor it was asked after (a
    /// server repeating a cursor or going back) is `BAD_FRAME` and ends
    /// the pages, as any other malformed answer (see
    /// [`HttpClient::receipts`]) does: every later call returns the same
    /// error.
    ///
    /// A 429 (the server reading the log for two other walks, or for this
    /// principal's one before) is waited out: the answer's `Retry-After`
    /// (else its `retryAfterMs`, else 1 s; at most [`RECEIPTS_MAX_WAIT`]),
    /// then the same page is asked again, up to [`RECEIPTS_RETRIES`] times;
    /// the next 429 is returned. It, and any other error (the server's
    /// refusal; the transport's), leaves the pages where they were: call
    /// again to ask for the same page. So does dropping the future (a
    /// caller's `tokio::time::timeout`, say), which ends a wait at once.
    pub async fn next_page(&mut self) -> Result<Option<ReceiptsPage>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.done {
            return Ok(None);
        }
        let mut waited = 0;
        let page = loop {
            let mut told = None;
            match self.http.receipts_told(&self.id, self.after.as_deref(), self.max, &mut told).await {
                Ok(p) => break p,
                Err(e) if e.code == "BAD_FRAME" => return Err(self.fail(e)),
                Err(e) if e.status == 429 && waited < RECEIPTS_RETRIES => {
                    waited += 1;
                    tokio::time::sleep(retry_wait(&e, told)).await;
                }
                Err(e) => return Err(e),
            }
        };
        match &page.next {
            None => self.done = true,
            Some(n) => {
                let at = self.after.as_deref().and_then(parse_cursor).unwrap_or((0, 0));
                match parse_cursor(n) {
                    Some(c) if moves_on(at, c) => self.after = Some(n.clone()),
                    _ => {
                        let at = self.after.as_deref().unwrap_or("the start");
                        let e = Error::protocol(format!(
                            "GET /v1/audit/receipts/{}: an answer with a next ({n}) that does not move past {at}",
                            encode_segment(&self.id)
                        ));
                        return Err(self.fail(e));
                    }
                }
            }
        }
        Ok(Some(page))
    }

    fn fail(&mut self, e: Error) -> Error {
        self.failed = Some(e.clone());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cursors_are_parsed_as_the_server_parses_them() {
        assert_eq!(parse_cursor(""), Some((0, 0)));
        assert_eq!(parse_cursor("41:7"), Some((41, 7)));
        assert_eq!(parse_cursor("007:0"), Some((7, 0)));
        assert_eq!(parse_cursor("41"), Some((41, u64::MAX)));
        assert_eq!(parse_cursor("18446744073709551615:18446744073709551615"), Some((u64::MAX, u64::MAX)));
        let past_64_bits = ["18446744073709551616", "1:18446744073709551616"];
        for bad in ["x:1", "1:x", ":1", "1:", "1:2:3", "-1", "+1", " 1", "1 ", "1: 2", "1.0", "١"].into_iter().chain(past_64_bits) {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_429_is_waited_its_retry_after_else_its_retry_after_ms_else_a_second_at_most_the_cap() {
        let busy = |details: Value| Error::with_details("RATE_LIMITED", "busy", details.as_object().cloned().unwrap_or_default());
        let s = Duration::from_secs;
        for (told, details, want) in [
            (Some(s(3)), json!({"retryAfterMs": 7000}), s(3)),
            (Some(s(0)), json!({}), s(0)),
            (Some(s(86_400)), json!({}), RECEIPTS_MAX_WAIT),
            (None, json!({"retryAfterMs": 2000}), s(2)),
            (None, json!({"retryAfterMs": 1500.5}), Duration::from_millis(1500)),
            (None, json!({"retryAfterMs": 86_400_000u64}), RECEIPTS_MAX_WAIT),
            (None, json!({"retryAfterMs": 1e300}), RECEIPTS_MAX_WAIT),
            (None, json!({}), s(1)),
            (None, json!({"retryAfterMs": "soon"}), s(1)),
            (None, json!({"retryAfterMs": -5}), s(1)),
            (None, json!({"retryAfterMs": true}), s(1)),
        ] {
            assert_eq!(retry_wait(&busy(details.clone()), told), want, "{told:?} {details}");
        }
    }

    #[test]
    fn the_pages_stop_on_a_next_that_does_not_move_on() {
        assert!(moves_on((0, 0), (1, 0)));
        assert!(moves_on((5, 2), (5, 3)));
        assert!(moves_on((5, 2), (6, 0)));
        assert!(!moves_on((5, 2), (5, 2)), "a repeated cursor");
        assert!(!moves_on((5, 2), (5, 1)), "a cursor going back");
        assert!(!moves_on((5, 2), (4, 9)), "a cursor going back");
    }

    fn r(audit: u64, seq: u64) -> Value {
        json!({"event": "replay.executed", "time": "2026-12-05T08:00:00.123Z", "principal": "p", "contractId": "ctr_1",
               "ref": "why", "auditSeq": audit, "subject": "s", "seq": seq})
    }

    #[test]
    fn a_page_is_read_in_order_past_its_cursor() {
        let p = page_of(&json!({"receipts": [r(3, 1), r(3, 2), r(4, 1)], "next": "4:1"}), (2, 9), 3).unwrap();
        assert_eq!(p.receipts.iter().map(Receipt::cursor).collect::<Vec<_>>(), ["3:1", "3:2", "4:1"]);
        assert_eq!(p.next.as_deref(), Some("4:1"));
        assert_eq!(p.receipts[0].time_ms(), crate::time::parse_rfc3339_ms("2026-12-05T08:00:00.123Z"));
        let minimal =
            json!({"event": "delivery.dispatched", "time": "2026-12-05T08:00:00Z", "principal": "p", "contractId": "c", "auditSeq": 1});
        let p = page_of(&json!({"receipts": [minimal]}), (0, 0), 10).unwrap();
        assert_eq!((p.receipts[0].ref_.as_str(), p.receipts[0].subject.as_str(), p.receipts[0].seq), ("", "", 0));
        assert_eq!(p.next, None);
    }
}
