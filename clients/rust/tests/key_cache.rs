//! Sealing through a `KeyCache` follows the recipient's published list: a
//! removed encryption key is not sealed for once the cached list is older
//! than the sealing bound, whatever the cache's ttl, and a cached key past
//! its window makes the list be read again. Both failed before
//! `KeyCache::encryption_key` (the cache's `keys` kept the list for its ttl).
//! Verification is bounded the same way: a removed signing key stops
//! verifying through `KeyCache::verify` once the cached list is older than
//! the verification bound (failed with the list kept for the ttl).

mod common;

use common::{http, in_ms, BOB};
use pigeon_client::crypto::{sign_message, Keys, PublicKey};
use pigeon_client::http::{KeyCache, SEAL_MAX_AGE, VERIFY_MAX_AGE};
use pigeon_client::Message;
use std::time::Duration;

/// bob's encryption key of `keys`, valid from `not_before` to `not_after`
/// (RFC 3339, empty: no bound, the member left out).
fn enc(keys: &Keys, not_before: &str, not_after: &str) -> PublicKey {
    let edge = |s: &str| (!s.is_empty()).then(|| s.into());
    let mut k = keys.public_keys().remove(1);
    k.not_before = edge(not_before);
    k.not_after = edge(not_after);
    k
}

/// Polls the cache's sealing key until it is `want`: within 10 s, else
/// the last kid (or error code) it gave.
async fn seals_for(cache: &KeyCache, want: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let kid = cache.encryption_key(BOB).await.map(|k| k.kid).unwrap_or_else(|e| e.code);
        if kid == want {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(kid);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_removed_encryption_key_is_not_sealed_for_past_the_sealing_bound() {
    assert_eq!(SEAL_MAX_AGE, Duration::from_secs(10), "the bound docs/security.md and the README name");
    let server = common::Server::start("");
    http(&server, "admin-token").ensure_account(BOB).await.unwrap();
    let bob = http(&server, "bob-token");
    let (old, new) = (Keys::generate(), Keys::generate());
    bob.publish_keys(BOB, &[enc(&old, "", "")]).await.unwrap();
    // A cache kept an hour, sealing from lists at most 200 ms old.
    let cache = KeyCache::new(http(&server, "alice-token"), Duration::from_secs(3600)).with_seal_max_age(Duration::from_millis(200));
    assert_eq!(cache.encryption_key(BOB).await.unwrap().kid, old.encryption_kid);
    // bob's old private key leaked: he lists only the new one.
    bob.publish_keys(BOB, &[enc(&new, "", "")]).await.unwrap();
    assert_eq!(seals_for(&cache, &new.encryption_kid).await, Ok(()), "still sealing for the removed key");
}

#[tokio::test]
async fn a_cached_key_past_its_window_makes_the_list_be_read_again() {
    let server = common::Server::start("");
    http(&server, "admin-token").ensure_account(BOB).await.unwrap();
    let bob = http(&server, "bob-token");
    let (old, new) = (Keys::generate(), Keys::generate());
    let at = in_ms(1500);
    bob.publish_keys(BOB, &[enc(&old, "", &at)]).await.unwrap();
    // Sealing bound and ttl both an hour: only the window can tell.
    let cache = KeyCache::new(http(&server, "alice-token"), Duration::from_secs(3600)).with_seal_max_age(Duration::from_secs(3600));
    assert_eq!(cache.encryption_key(BOB).await.unwrap().kid, old.encryption_kid);
    // The rotation, published after the cache read the list.
    bob.publish_keys(BOB, &[enc(&old, "", &at), enc(&new, &at, "")]).await.unwrap();
    assert_eq!(seals_for(&cache, &new.encryption_kid).await, Ok(()), "the cached key's window passed and the list was not read again");
}

/// bob's signing key of `keys`, with no window.
fn sig(keys: &Keys) -> PublicKey {
    keys.public_keys().remove(0)
}

/// A chat message signed with `keys`'s signing key.
fn signed(keys: &Keys) -> Message {
    let mut m = Message { subject: "chat.messages".into(), data: serde_json::json!({"text": "hi"}), ..Default::default() };
    sign_message(&mut m, &keys.signing_kid, &keys.signing).unwrap();
    m
}

#[tokio::test]
async fn a_removed_signing_key_stops_verifying_past_the_verification_bound() {
    assert_eq!(VERIFY_MAX_AGE, Duration::from_secs(10), "the bound docs/security.md and the README name");
    let server = common::Server::start("");
    http(&server, "admin-token").ensure_account(BOB).await.unwrap();
    let bob = http(&server, "bob-token");
    let (old, new) = (Keys::generate(), Keys::generate());
    assert_eq!(sig(&old).use_, "sig");
    bob.publish_keys(BOB, &[sig(&old)]).await.unwrap();
    // A cache kept an hour, verifying with lists at most 200 ms old.
    let cache = KeyCache::new(http(&server, "alice-token"), Duration::from_secs(3600)).with_verify_max_age(Duration::from_millis(200));
    let m = signed(&old);
    cache.verify(BOB, &m).await.unwrap();
    assert_eq!(cache.keys(BOB).await.unwrap()[0].kid, old.signing_kid, "keys keeps the list for its ttl");
    // bob's old private key leaked: he lists only the new one.
    bob.publish_keys(BOB, &[sig(&new)]).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let got = loop {
        let got = cache.verify(BOB, &m).await.map(|()| "verified".to_string()).unwrap_or_else(|e| e.code);
        if got != "verified" || tokio::time::Instant::now() >= deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(got, "SIGNATURE_INVALID", "a signature of the removed key still verifies");
    cache.verify(BOB, &signed(&new)).await.unwrap();
    let unsigned = Message { signature: None, ..m };
    assert_eq!(cache.verify(BOB, &unsigned).await.unwrap_err().code, "SIGNATURE_REQUIRED");
}
