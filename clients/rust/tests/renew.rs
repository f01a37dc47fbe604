//! Renewing the contract in place (the `renew` op) against a real
//! `pigeon serve`: by the session itself (`ConnectOptions::auto_renew`, on
//! by default) and by `Session::renew`. Contracts here live 600 ms (1 s in the last case).

mod common;

use common::*;
use futures_util::StreamExt;
use pigeon_client::{ConnectOptions, Contract, Session, Status, SubscribeOptions, Subscription};
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

        let wait = expiry(&s0) - pigeon_client::time::now_ms();
        // expires_at_ms() drops the sub-millisecond part of the expiry: past it by a margin.
        tokio::time::sleep(Duration::from_millis(wait.max(0) as u64 + 50)).await;
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
        let wait = expiry(&m0).max(expiry(&s0)) - pigeon_client::time::now_ms();
        // expires_at_ms() drops the sub-millisecond part of the expiry: past it by a margin.
        tokio::time::sleep(Duration::from_millis(wait.max(0) as u64 + 50)).await;
        round_trip(&sensor, &mut sub, &site, 1).await;
        assert!(sub.error().is_none(), "{:?}", sub.error());
        sub.unsubscribe().await.unwrap();
        mon.close().await.unwrap();
        sensor.close().await.unwrap();
    });
}
