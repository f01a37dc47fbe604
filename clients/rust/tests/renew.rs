//! Renewing the contract in place (the `renew` op) against a real
//! `pigeon serve`: by the session itself (`ConnectOptions::auto_renew`, on
//! by default) and by `Session::renew`. Contracts here live 600 ms (1 s in
//! the explicit renewal and the failed renewal cases).

mod common;

use common::*;
use futures_util::StreamExt;
use pigeon_client::{ConnectOptions, Contract, Error, Session, Status, SubscribeOptions, Subscription};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_millis(600);
const TELEMETRY: &str = "events.telemetry";

fn run(f: impl std::future::Future<Output = ()>) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), f).await.expect("the test hung");
    });
}

async fn connect(srv: &Server, token: &str, opts: ConnectOptions) -> Session {
    Session::connect(&srv.url(), token, &[TELEMETRY], opts).await.unwrap()
}

fn expiry(c: &Contract) -> i64 {
    c.expires_at_ms().unwrap_or_else(|| panic!("no expiry in {c:?}"))
}

/// Sleeps until `margin_ms` past `at_ms` (an expiry, in ms since the
/// epoch), or not at all once that has passed. expires_at_ms() drops the
/// sub-millisecond part of an expiry: a margin makes sure it is passed.
async fn sleep_past(at_ms: i64, margin_ms: i64) {
    let wait = at_ms + margin_ms - pigeon_client::time::now_ms();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
}

/// Options with `ttl` whose `on_error` keeps the failed renewals it is
/// handed, in order.
fn recording_renewal_failures(ttl: Duration) -> (ConnectOptions, Arc<Mutex<Vec<Error>>>) {
    let failures = Arc::new(Mutex::new(Vec::new()));
    let f = failures.clone();
    let opts = ConnectOptions::default().ttl(ttl).on_error(move |e| {
        if e.message.starts_with("renewing the contract failed") {
            f.lock().unwrap().push(e);
        }
    });
    (opts, failures)
}

/// The `contract.denied` audit records that name contract `id`.
async fn denials(srv: &Server, id: &str) -> usize {
    let (_, v) = http(srv, "auditor-token").call("GET", "/v1/audit", None).await.unwrap();
    v["records"].as_array().unwrap().iter().filter(|r| r["type"] == "contract.denied" && r["contractId"] == id).count()
}

/// A monitor's subscription to the readings of `site`.
async fn subscribe(mon: &Session, site: &str) -> Subscription {
    mon.subscribe_stream(TELEMETRY, SubscribeOptions::default().selector(format!("/kind=renew/site={site}"))).await.unwrap()
}

/// Publishes a reading of `site` and waits (at most 2 s) for `sub` to get it.
async fn round_trip(sensor: &Session, sub: &mut Subscription, site: &str, i: usize) {
    let d = sensor.publish(&telemetry("renew", site, i as f64)).await.unwrap_or_else(|e| panic!("publish {i}: {e}"));
    assert_eq!(d.status, Status::Accepted);
    let got = tokio::time::timeout(Duration::from_secs(2), sub.next())
        .await
        .unwrap_or_else(|_| panic!("delivery {i} did not come"))
        .unwrap_or_else(|| panic!("the subscription ended before delivery {i}: {:?}", sub.error()))
        .unwrap_or_else(|e| panic!("delivery {i}: {e}"));
    assert_eq!(got.message.id, d.id());
    got.ack().await.unwrap();
}

/// With automatic renewal (the default), a session whose contract lives
/// 600 ms publishes, and its subscription receives, for three lifetimes
/// and more, under the same contract, whose expiry moves later.
#[test]
fn auto_renew_keeps_the_contract_alive() {
    run(async {
        let srv = Server::start("");
        let site = format!("auto-{}", nonce());
        let mon = connect(&srv, "monitor-token", ConnectOptions::default().ttl(TTL)).await;
        let sensor = connect(&srv, "sensor-token", ConnectOptions::default().ttl(TTL)).await;
        let (m0, s0) = (mon.contract(), sensor.contract());
        let mut sub = subscribe(&mon, &site).await;
        let start = Instant::now();
        let mut i = 0;
        while start.elapsed() < TTL * 3 + Duration::from_millis(200) {
            round_trip(&sensor, &mut sub, &site, i).await;
            i += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(i >= 10, "only {i} round trips");
        let now = pigeon_client::time::now_ms();
        assert!(now > expiry(&m0) + 2 * TTL.as_millis() as i64, "not past two more lifetimes");
        for (before, after) in [(&m0, mon.contract()), (&s0, sensor.contract())] {
            assert_eq!(after.id, before.id, "renewal changed the contract");
            assert!(expiry(&after) > now, "the contract {} is expired ({})", after.id, after.expires_at);
            assert!(expiry(&after) > expiry(before), "the expiry did not move: {} -> {}", before.expires_at, after.expires_at);
        }
        assert!(sub.error().is_none(), "{:?}", sub.error());
        sub.unsubscribe().await.unwrap();
        mon.close().await.unwrap();
        sensor.close().await.unwrap();
    });
}

/// With automatic renewal off, the contract expires after its lifetime:
/// the subscription ends with CONTRACT_EXPIRED, and so do publishes.
#[test]
fn without_auto_renew_the_contract_expires() {
    run(async {
        let srv = Server::start("");
        let site = format!("off-{}", nonce());
        let opts = ConnectOptions::default().ttl(TTL).auto_renew(false);
        let mon = connect(&srv, "monitor-token", opts.clone()).await;
        let sensor = connect(&srv, "sensor-token", opts).await;
        let (m0, s0) = (mon.contract(), sensor.contract());
        let mut sub = subscribe(&mon, &site).await;
        round_trip(&sensor, &mut sub, &site, 0).await;

        let ended = tokio::time::timeout(TTL + Duration::from_secs(3), sub.done()).await.expect("the subscription did not end");
        assert!(pigeon_client::time::now_ms() >= expiry(&m0), "ended before the contract expired");
        assert_eq!(ended.map(|e| e.code), Some("CONTRACT_EXPIRED".to_string()));

        sleep_past(expiry(&s0), 50).await;
        let e = match sensor.publish(&telemetry("renew", &site, 1.0)).await {
            Ok(d) => panic!("published past the expiry {} of {}: {d:?}", s0.expires_at, s0.id),
            Err(e) => e,
        };
        assert_eq!(e.code, "CONTRACT_EXPIRED", "{e}");
        assert_eq!(sensor.contract(), s0, "the contract changed without a renewal");
        mon.close().await.unwrap();
        sensor.close().await.unwrap();
    });
}

/// `Session::renew` keeps the contract's id and moves its expiry later: a
/// subscription and publishes go on past the first expiry.
#[test]
fn explicit_renew_keeps_the_id() {
    run(async {
        let srv = Server::start("");
        let site = format!("explicit-{}", nonce());
        // A longer lifetime than the others': room to work between the two expiries.
        let ttl = Duration::from_secs(1);
        let opts = ConnectOptions::default().ttl(ttl).auto_renew(false);
        let mon = connect(&srv, "monitor-token", opts.clone()).await;
        let sensor = connect(&srv, "sensor-token", opts).await;
        let (m0, s0) = (mon.contract(), sensor.contract());
        let mut sub = subscribe(&mon, &site).await;
        round_trip(&sensor, &mut sub, &site, 0).await;

        tokio::time::sleep(ttl / 2).await;
        for (s, before) in [(&mon, &m0), (&sensor, &s0)] {
            let after = s.renew().await.unwrap();
            assert_eq!(after.id, before.id, "renew changed the contract");
            assert!(expiry(&after) > expiry(before), "the expiry did not move: {} -> {}", before.expires_at, after.expires_at);
            assert_eq!(s.contract(), after, "the session does not hold the renewed contract");
        }

        // Past the first expiry, before the renewed one.
        sleep_past(expiry(&m0).max(expiry(&s0)), 50).await;
        round_trip(&sensor, &mut sub, &site, 1).await;
        assert!(sub.error().is_none(), "{:?}", sub.error());
        sub.unsubscribe().await.unwrap();
        mon.close().await.unwrap();
        sensor.close().await.unwrap();
    });
}

/// A renewal refused for good (here CONTRACT_REVOKED: the contract was
/// revoked over HTTP) is not tried again: one `renew` frame, one
/// `contract.denied` record, one report to `on_error` saying renewal
/// stopped, where every few hundred milliseconds until the expiry would
/// each count toward the negotiation rate. A new contract is renewed in
/// turn.
#[test]
fn a_final_refusal_stops_the_renewals_of_that_contract() {
    run(async {
        let srv = Server::start("");
        let ttl = Duration::from_secs(1);
        let (opts, failures) = recording_renewal_failures(ttl);
        let sensor = connect(&srv, "sensor-token", opts).await;
        let c0 = sensor.contract();
        http(&srv, "sensor-token").revoke_contract(&c0.id).await.unwrap();

        // Past the expiry, until which a failed renewal would be tried again.
        sleep_past(expiry(&c0), 300).await;
        let got: Vec<String> = failures.lock().unwrap().iter().map(|e| format!("{} {}", e.code, e.message)).collect();
        assert_eq!(got.len(), 1, "renewals attempted after the revocation: {got:#?}");
        assert!(got[0].starts_with("CONTRACT_REVOKED ") && got[0].contains("renewal stopped"), "{}", got[0]);
        assert_eq!(denials(&srv, &c0.id).await, 1, "contract.denied records of {}", c0.id);

        // A new contract is renewed as before.
        let c1 = sensor.negotiate().await.unwrap();
        assert_ne!(c1.id, c0.id);
        sleep_past(expiry(&c1), 100).await;
        let now = sensor.contract();
        assert_eq!(now.id, c1.id, "the contract changed without a negotiation");
        assert!(expiry(&now) > expiry(&c1), "the new contract was not renewed: {} -> {}", c1.expires_at, now.expires_at);
        assert_eq!(sensor.publish(&telemetry("renew", &nonce(), 1.0)).await.unwrap().status, Status::Accepted);
        assert_eq!(failures.lock().unwrap().len(), 1, "{:#?}", failures.lock().unwrap());
        sensor.close().await.unwrap();
    });
}

/// A renewal refused for now (RATE_LIMITED: the principal's negotiations
/// spent its negotiation rate, renewals included) is tried again, and the
/// contract goes on under its id.
#[test]
fn a_transient_refusal_is_tried_again() {
    run(async {
        let srv = Server::start("");
        let ttl = Duration::from_secs(1);
        let (opts, failures) = recording_renewal_failures(ttl);
        let sensor = connect(&srv, "sensor-token", opts).await;
        let c0 = sensor.contract();

        // Negotiates over HTTP as the same principal until a renewal is
        // refused RATE_LIMITED: the rate's bucket stays empty meanwhile.
        let stop = Arc::new(AtomicBool::new(false));
        let spend = {
            let (stop, client) = (stop.clone(), http(&srv, "sensor-token"));
            tokio::spawn(async move {
                let body = json!({"subjects": [TELEMETRY], "ttlMs": 1000});
                while !stop.load(Ordering::Relaxed) {
                    let _ = client.call("POST", "/v1/contracts", Some(body.clone())).await;
                }
            })
        };
        let refused = eventually(Duration::from_secs(10), || !failures.lock().unwrap().is_empty()).await;
        stop.store(true, Ordering::Relaxed);
        spend.await.unwrap();
        assert!(refused, "no renewal was refused");
        let before = sensor.contract();
        assert_eq!(before.id, c0.id);

        let renewed = eventually(Duration::from_secs(2), || expiry(&sensor.contract()) > expiry(&before)).await;
        let got: Vec<String> = failures.lock().unwrap().iter().map(|e| format!("{} {}", e.code, e.message)).collect();
        assert!(renewed, "the refused renewal was not tried again: {got:#?}");
        assert_eq!(sensor.contract().id, c0.id, "renewal changed the contract");
        assert!(got.iter().all(|e| e.starts_with("RATE_LIMITED ") && e.contains("trying again")), "{got:#?}");
        assert_eq!(sensor.publish(&telemetry("renew", &nonce(), 1.0)).await.unwrap().status, Status::Accepted);
        sensor.close().await.unwrap();
    });
}
