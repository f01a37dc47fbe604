//! The listings the Rust client reads (a message's receipts, an account's
//! keys) hold at most what the server ever sends in one answer: a page of
//! receipts [`MAX_RECEIPTS_PAGE`] (the server's cap of `max`), a key list
//! [`MAX_ACCOUNT_KEYS`] (the most keys an account publishes). An answer
//! listing more is no server's: refused `BAD_FRAME` as the reading comes
//! to the entry past the bound, which is skipped over, not built, as
//! nothing after it is (64 MiB of `{}` entries would be about 22 million
//! values). The TypeScript (test/listings.test.mjs) and Python
//! (tests/test_http_listings.py) clients refuse the same answers.

mod common;

use common::{http_answering, http_canned};
use pigeon_client::crypto::Keys;
use pigeon_client::http::{HttpClient, MAX_ACCOUNT_KEYS, MAX_RECEIPTS_PAGE};
use pigeon_client::ErrorKind;
use serde_json::{json, Value};

fn receipt(i: usize) -> Value {
    json!({"event": "delivery.dispatched", "time": "2026-12-05T08:00:00.5Z", "principal": "p", "contractId": "ctr_1",
           "auditSeq": i + 1, "seq": 1, "note": "a [list], \"quoted\", {braced}"})
}

/// A sound signing key of kid `k{i}` (the keys listing reads only sound
/// keys), with a member that is no field of a key.
fn key(i: usize) -> Value {
    let mut k = serde_json::to_value(&Keys::from_bytes([7; 32], [107; 32]).public_keys()[0]).unwrap();
    (k["kid"], k["extra"]) = (json!(format!("k{i}")), json!([[1, 2], {"a": [3]}]));
    k
}

/// The answer whose `member` lists `n` entries, `entry(i)` each, written
/// with `comma` between them.
fn page(member: &str, n: usize, entry: fn(usize) -> Value, comma: &str) -> String {
    let entries: Vec<String> = (0..n).map(|i| entry(i).to_string()).collect();
    format!("{{\"{member}\":[{}]}}", entries.join(comma))
}

/// What a listing call read: the entries it handed over, or its error.
async fn read(url: &str, listing: &str) -> Result<usize, pigeon_client::Error> {
    let h = HttpClient::new(url, "t");
    match listing {
        "receipts" => h.receipts("msg_1", None, None).await.map(|p| p.receipts.len()),
        _ => h.fetch_keys("acct").await.map(|ks| ks.len()),
    }
}

#[tokio::test]
async fn a_listing_of_more_entries_than_the_server_sends_is_refused_before_the_entries_past_it_are_built() {
    let mut wrong = Vec::new();
    for (listing, route, most, entry) in [
        ("receipts", "/v1/audit/receipts/", MAX_RECEIPTS_PAGE as usize, receipt as fn(usize) -> Value),
        ("keys", "/keys ", MAX_ACCOUNT_KEYS, key as fn(usize) -> Value),
    ] {
        let full: Value = serde_json::from_str(&page(listing, most, entry, ",")).unwrap();
        let (url, _) = http_answering(route, full).await;
        match read(&url, listing).await {
            Ok(n) if n == most => {}
            got => wrong.push(format!("{listing}: the full page: {got:?}")),
        }
        let escaped = format!("\\u{:04x}{}", listing.as_bytes()[0], &listing[1..]);
        for (name, text) in [
            ("one more", page(listing, most + 1, entry, ",")),
            ("one more, spaced out", page(listing, most + 1, entry, " \r\n,\t ").replacen(":[", " : [ \n", 1)),
            ("one more, under an escaped name", page(&escaped, most + 1, entry, ",")),
            ("empty objects past the bound", format!("{{\"{listing}\":[{}{{}}]}}", "{},".repeat(most * 10))),
            // The entry past the bound is skipped over, and nothing after
            // it read: were it, the answer would be refused as no JSON.
            ("one more, then no JSON", format!("{},{{}},{{@@ no JSON", page(listing, most, entry, ",").strip_suffix("]}").unwrap())),
        ] {
            let (url, _) = http_canned(200, text).await;
            match read(&url, listing).await {
                Err(e)
                    if e.code == "BAD_FRAME"
                        && e.kind == ErrorKind::Protocol
                        && e.message.contains(&format!("more than {most} entries in {listing}")) => {}
                got => wrong.push(format!("{listing}, {name}: {:.300}", format!("{got:?}"))),
            }
        }
        // A list of that name deeper in the answer is not the listing's.
        let nested = format!("{{\"x\":{},\"{listing}\":[]}}", page(listing, most + 1, entry, ","));
        let (url, _) = http_canned(200, nested).await;
        match read(&url, listing).await {
            Ok(0) => {}
            got => wrong.push(format!("{listing}, a deeper list: {:.300}", format!("{got:?}"))),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
