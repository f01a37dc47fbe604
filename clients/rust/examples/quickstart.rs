//! The README's example: a work-queue worker and a publisher.
//! `cargo run --example quickstart` against a server with the conformance catalog.

use pigeon_client::{ConnectOptions, Message, Session, SubscribeOptions};
use serde_json::json;
use std::time::Duration;

#[tokio::main]
async fn main() -> pigeon_client::Result<()> {
    let url = "ws://127.0.0.1:8787";
    let worker = Session::connect(url, "notifier-token", &["notifications.send"], ConnectOptions::default()).await?;
    let sub = worker
        .subscribe("notifications.send", SubscribeOptions::default().group("mailers"), |d| async move {
            println!("send {} (attempt {})", d.message.data["templateId"], d.attempt);
            Ok(()) // Ok acks; Err(HandlerError) nacks, with an optional retry delay
        })
        .await?;
    let orders = Session::connect(url, "orders-token", &["notifications.send"], ConnectOptions::default().region("uk")).await?;
    let m = Message::new("notifications.send", "notification.send.requested", "send_notification")
        .with_idempotency_key("order-42-confirmation")
        .with_classification("pii")
        .with_data(json!({"recipientId": "c-42", "channel": "email", "templateId": "order-confirmed"}));
    match orders.publish(&m).await {
        Ok(d) => println!("{:?} {} seq {}", d.status, d.id(), d.sequence()),
        Err(e) if e.is_quarantined() => println!("quarantined {:?}: {}", e.quarantine_id(), e.code),
        Err(e) => println!("refused: {e}"),
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    sub.unsubscribe().await?;
    orders.close().await?;
    worker.close().await
}
