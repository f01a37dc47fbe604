//! Benchmarks against a running server (started with the conformance
//! catalog, see README):
//!
//! 1. pipelined governed publishes per second on one connection;
//! 2. publish→deliver round trip (p50, p99), one message at a time.
//!
//! `cargo run --release --example bench -- [URL] [PUBLISHES] [ROUND_TRIPS] [PUBLISH_FRAMES_IN_FLIGHT]`

use pigeon_client::{ConnectOptions, Message, Session, SubscribeOptions};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

fn reading(kind: &str, i: usize) -> Message {
    Message::new("events.telemetry", "telemetry.reading", "report")
        .with_classification("internal")
        .with_data(json!({"kind": kind, "site": "bench", "value": i}))
}

#[tokio::main]
async fn main() -> pigeon_client::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(1).cloned().unwrap_or_else(|| "ws://127.0.0.1:8787".into());
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50_000);
    let rtts: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1_000);

    let frames: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1);
    let opts = ConnectOptions { max_pending_publishes: 4096, publish_frames_in_flight: frames, ..Default::default() };
    let sensor = Session::connect(&url, "sensor-token", &["events.telemetry"], opts).await?;

    // 1. Pipelined publishes: a producer queues, a consumer awaits in order.
    let (tx, mut rx) = mpsc::channel(8192);
    let start = Instant::now();
    let consumer = tokio::spawn(async move {
        let (mut ok, mut refused) = (0usize, 0usize);
        while let Some(p) = rx.recv().await {
            match p.await {
                Ok(_) => ok += 1,
                Err(_) => refused += 1,
            }
        }
        (ok, refused)
    });
    for i in 0..n {
        let p = sensor.publish_async(&reading("load", i)).await?;
        if tx.send(p).await.is_err() {
            break;
        }
    }
    drop(tx);
    let (ok, refused) = consumer.await.unwrap();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "pipelined publish ({frames} frame(s) in flight): {n} messages in {secs:.3} s = {:.0} msgs/s ({ok} accepted, {refused} refused)",
        n as f64 / secs
    );

    // 2. Round trip: publish one, wait for its delivery, repeat.
    let monitor = Session::connect(&url, "monitor-token", &["events.telemetry"], ConnectOptions::default()).await?;
    let (dtx, mut drx) = mpsc::unbounded_channel();
    let sub = monitor
        .subscribe("events.telemetry", SubscribeOptions::default().selector("/kind=rtt"), move |d| {
            let _ = dtx.send(d.message.id);
            async { Ok(()) }
        })
        .await?;
    let mut samples = Vec::with_capacity(rtts);
    for i in 0..rtts {
        let t = Instant::now();
        let d = sensor.publish(&reading("rtt", i)).await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), drx.recv()).await {
                Ok(Some(id)) if id == d.message.id => break,
                Ok(Some(_)) => continue,
                _ => panic!("delivery {i} did not arrive"),
            }
        }
        samples.push(t.elapsed());
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    println!("publish->deliver round trip: p50 {:?}, p99 {:?} over {rtts}", pct(0.5), pct(0.99));
    sub.unsubscribe().await?;
    monitor.close().await?;
    sensor.close().await?;
    Ok(())
}
