//! Rust client of Pigeon, the contract-native message broker: the
//! WebSocket protocol of `pigeon serve` (docs/protocol.md) on tokio, and
//! end-to-end signatures and sealed payloads byte-compatible with the Go
//! implementation (docs/security.md).
//!
//! ```no_run
//! # async fn run() -> pigeon_client::Result<()> {
//! use pigeon_client::{ConnectOptions, Message, Session};
//! let s = Session::connect("ws://127.0.0.1:8787", "checkout-token", &["payments.authorize"], ConnectOptions::default()).await?;
//! let d = s.publish(&Message::new("payments.authorize", "payment.authorization.requested", "authorize_payment")).await?;
//! println!("{} {}", d.id(), d.sequence());
//! s.close().await
//! # }
//! ```

mod conn;
pub mod crypto;
mod error;
pub mod http;
pub mod jcs;
mod message;
mod receipts;
mod session;
mod subscription;
pub mod time;
mod tls;

pub use conn::MAX_PUBLISH_BATCH;
pub use error::{escape_text, http_status, Error, ErrorKind, Result};
pub use message::{Contract, ContractSubject, Decision, Message, Signature, Status, MAX_ATTEMPT};
pub use session::{
    ConnectOptions, ErrorCallback, PendingPublish, ReplayOptions, Session, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_PENDING_PUBLISH_BYTES,
    FINAL_RENEW_REFUSALS,
};
pub use subscription::{Ack, Delivery, HandlerError, Start, SubscribeOptions, Subscription, MAX_QUEUED, MAX_QUEUED_BYTES};
pub use tls::TlsConfig;
/// The rustls crate the client's TLS uses, for [`TlsConfig::from_rustls`].
pub use tokio_rustls::rustls;
