//! TLS and mTLS (docs/identity.md) against real `pigeon serve` processes
//! with `--tls-cert --tls-key`, and for mTLS `--client-ca --trust-domain
//! --mtls-mode`. The PKI is made at test time: a CA, server certificates
//! and client certificates whose URI SAN is a SPIFFE ID of the trust
//! domain `rust-tls`, and a second CA that the server does not trust.

mod common;

use common::*;
use pigeon_client::http::HttpClient;
use pigeon_client::{ConnectOptions, Error, ErrorKind, Message, Session, Status, SubscribeOptions, TlsConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const TRUST_DOMAIN: &str = "rust-tls";
/// The principal of the bearer token.
const TOKEN_WRITER: &str = "spiffe://rust-tls/ns/test/sa/token-writer";
/// The principal of the client certificate the policy allows.
const CERT_WRITER: &str = "spiffe://rust-tls/ns/test/sa/cert-writer";
/// A certificate principal of the trust domain that no policy names.
const STRANGER: &str = "spiffe://rust-tls/ns/test/sa/stranger";
const SUBJECT: &str = "notes.any";

/// A CA: its certificate and key.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca { cert: p.self_signed(&key).unwrap(), key }
    }

    /// A leaf certificate and its key (PEM) for `sans` (DNS names and IP
    /// addresses) and `uri` (a SPIFFE ID), for the server or the client.
    fn leaf(&self, sans: &[&str], uri: Option<&str>, server: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, if server { "pigeon" } else { "client" });
        if let Some(u) = uri {
            p.subject_alt_names.push(SanType::URI(u.try_into().unwrap()));
        }
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![if server { ExtendedKeyUsagePurpose::ServerAuth } else { ExtendedKeyUsagePurpose::ClientAuth }];
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The test PKI and catalog, written to a fresh directory.
struct Pki {
    dir: PathBuf,
    ca: String,
    other_ca: String,
    writer: (String, String),
    stranger: (String, String),
    /// a certificate of CERT_WRITER signed by the CA the server does not trust
    forged: (String, String),
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!("pigeon-rs-tls-{}", nonce()));
        std::fs::create_dir_all(dir.join("subjects")).unwrap();
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        let allow = json!([{"effect": "allow", "principals": [TOKEN_WRITER, CERT_WRITER]}]);
        let subject = json!({
            "name": SUBJECT, "version": "v1", "mode": "pubsub", "intents": ["note"],
            "policy": {"publish": allow, "receive": allow, "ack": allow},
        });
        std::fs::write(dir.join("subjects").join(format!("{SUBJECT}.json")), subject.to_string()).unwrap();
        std::fs::write(dir.join("tokens.yaml"), format!("tokens:\n  - {{ token: writer-token, principal: \"{TOKEN_WRITER}\" }}\n"))
            .unwrap();

        let (ca, other) = (Ca::new("rust-tls CA"), Ca::new("another CA"));
        let write = |name: &str, (cert, key): (String, String)| {
            std::fs::write(dir.join(format!("{name}.pem")), &cert).unwrap();
            std::fs::write(dir.join(format!("{name}-key.pem")), &key).unwrap();
            (cert, key)
        };
        write("server", ca.leaf(&["localhost", "127.0.0.1"], None, true));
        write("server-elsewhere", ca.leaf(&["pigeon.test"], None, true));
        std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
        Pki {
            ca: ca.cert.pem(),
            other_ca: other.cert.pem(),
            writer: write("writer", ca.leaf(&[], Some(CERT_WRITER), false)),
            stranger: write("stranger", ca.leaf(&[], Some(STRANGER), false)),
            forged: write("forged", other.leaf(&[], Some(CERT_WRITER), false)),
            dir,
        }
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }

    /// `pigeon serve` over TLS with `server_cert` (server or
    /// server-elsewhere), and with mTLS in `mtls_mode` when given.
    fn serve(&self, server_cert: &str, mtls_mode: Option<&str>) -> Server {
        let mut args = vec![
            "--tls-cert".to_string(),
            self.file(&format!("{server_cert}.pem")),
            "--tls-key".to_string(),
            self.file(&format!("{server_cert}-key.pem")),
        ];
        if let Some(mode) = mtls_mode {
            for a in ["--client-ca", &self.file("ca.pem"), "--trust-domain", TRUST_DOMAIN, "--mtls-mode", mode] {
                args.push(a.to_string());
            }
        }
        Server::start_catalog_with(&self.dir, &args)
    }

    /// Trusts the test CA.
    fn tls(&self) -> TlsConfig {
        TlsConfig::new().ca_pem(&self.ca).unwrap()
    }

    /// Trusts the test CA and presents `client` (cert, key).
    fn mtls(&self, client: &(String, String)) -> TlsConfig {
        self.tls().client_cert_pem(&client.0, &client.1).unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn note(text: &str) -> Message {
    Message::new(SUBJECT, "note", "note").with_data(json!({ "text": text }))
}

fn opts(tls: TlsConfig) -> ConnectOptions {
    ConnectOptions::default().tls(tls).reconnect(false)
}

/// Connects, bounded: a TLS failure is an error, never a hang.
async fn try_connect(srv: &Server, token: &str, tls: TlsConfig) -> Result<Session, Error> {
    tokio::time::timeout(Duration::from_secs(15), Session::connect(&srv.url(), token, &[SUBJECT], opts(tls))).await.expect("connect hung")
}

async fn try_call(client: HttpClient) -> Result<(u16, Value), Error> {
    let body = json!({ "subjects": [SUBJECT] });
    tokio::time::timeout(Duration::from_secs(15), client.call("POST", "/v1/contracts", Some(body))).await.expect("HTTP call hung")
}

/// The error of a connection that must fail, checked to be typed and to
/// say why in `details.tls`.
fn refused(r: Result<Session, Error>, code: &str, kind: ErrorKind, tls: &str) -> Error {
    let e = match r {
        Ok(_) => panic!("connected, want {code} ({tls})"),
        Err(e) => e,
    };
    assert_eq!((e.code.as_str(), e.kind, e.details.get("tls").and_then(Value::as_str)), (code, kind, Some(tls)), "{e}");
    e
}

fn refused_http(r: Result<(u16, Value), Error>, code: &str, kind: ErrorKind, tls: &str) -> Error {
    let e = r.expect_err("the call went through");
    assert_eq!((e.code.as_str(), e.kind, e.details.get("tls").and_then(Value::as_str)), (code, kind, Some(tls)), "{e}");
    e
}

/// wss:// and https:// with the CA added: a publish and subscribe round
/// trip authenticated by a token, an HTTP call; without the CA (the
/// platform roots) and with another CA the server is not trusted. With
/// `--mtls-mode optional` a client certificate is the credential: the
/// contract's principal is its SPIFFE ID, and a publish the policy allows
/// that principal is accepted.
#[test]
fn tls_and_optional_mtls() {
    let pki = Pki::new();
    let srv = pki.serve("server", Some("optional"));
    runtime().block_on(async {
        // The round trip over wss://, a token as the credential.
        let s = try_connect(&srv, "writer-token", pki.tls()).await.unwrap_or_else(|e| panic!("connect over wss: {e}"));
        assert_eq!((s.contract().principal.as_str(), s.contract().auth.as_str()), (TOKEN_WRITER, "token"));
        let mut sub = s.subscribe_stream(SUBJECT, SubscribeOptions::default()).await.unwrap();
        let d = s.publish(&note("over wss")).await.unwrap();
        assert_eq!(d.status, Status::Accepted);
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.expect("a delivery").unwrap().unwrap();
        got.ack().await.unwrap();
        assert_eq!(got.message, d.message);

        // https:// (the session's URL, wss://, maps to it too).
        let (status, v) = try_call(HttpClient::new(&srv.url(), "writer-token").with_tls(pki.tls())).await.unwrap();
        assert_eq!((status, &v["contract"]["principal"], &v["contract"]["auth"]), (201, &json!(TOKEN_WRITER), &json!("token")), "{v}");
        let (_, v) = try_call(HttpClient::new(&srv.http(), "writer-token").with_tls(pki.tls())).await.unwrap();
        assert_eq!(v["contract"]["principal"], json!(TOKEN_WRITER));

        // Not trusted: the platform roots (no CA given), another CA.
        for (what, tls) in [("platform roots", TlsConfig::new()), ("another CA", TlsConfig::new().ca_pem(&pki.other_ca).unwrap())] {
            let e = refused(try_connect(&srv, "writer-token", tls.clone()).await, "TLS_FAILED", ErrorKind::Transport, "unknown_issuer");
            assert!(e.is_transport() && e.message.contains("unknown issuer"), "{what}: {e}");
            let client = HttpClient::new(&srv.http(), "writer-token").with_tls(tls);
            refused_http(try_call(client).await, "TLS_FAILED", ErrorKind::Transport, "unknown_issuer");
        }
        let e = refused(
            tokio::time::timeout(
                Duration::from_secs(15),
                Session::connect(&srv.url(), "writer-token", &[SUBJECT], ConnectOptions::default()),
            )
            .await
            .unwrap(),
            "TLS_FAILED",
            ErrorKind::Transport,
            "unknown_issuer",
        );
        assert!(e.message.contains("127.0.0.1"), "{e}");

        // mTLS: the certificate alone (no token), its SPIFFE ID the principal.
        let m = try_connect(&srv, "", pki.mtls(&pki.writer)).await.unwrap_or_else(|e| panic!("connect with a client certificate: {e}"));
        assert_eq!((m.contract().principal.as_str(), m.contract().auth.as_str()), (CERT_WRITER, "mtls"));
        let d = m.publish(&note("from a certificate")).await.unwrap();
        assert_eq!(d.status, Status::Accepted);
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.expect("a delivery").unwrap().unwrap();
        got.ack().await.unwrap();
        assert_eq!(got.message.data, json!({"text": "from a certificate"}));
        let (_, v) = try_call(HttpClient::new(&srv.http(), "").with_tls(pki.mtls(&pki.writer))).await.unwrap();
        assert_eq!((&v["contract"]["principal"], &v["contract"]["auth"]), (&json!(CERT_WRITER), &json!("mtls")), "{v}");

        // With a certificate, the certificate decides: even beside a good token.
        let both = try_connect(&srv, "writer-token", pki.mtls(&pki.writer)).await.unwrap();
        assert_eq!(both.contract().principal, CERT_WRITER);

        // A principal no policy names gets no contract.
        let e = try_connect(&srv, "", pki.mtls(&pki.stranger)).await.err().expect("the stranger has no contract");
        assert_eq!((e.code.as_str(), e.kind), ("NO_PERMITTED_SUBJECTS", ErrorKind::Contract), "{e}");

        // A certificate of the right SPIFFE ID from a CA the server does not trust.
        let e = refused(
            try_connect(&srv, "writer-token", pki.mtls(&pki.forged)).await,
            "UNAUTHENTICATED",
            ErrorKind::Unauthenticated,
            "client_certificate_refused",
        );
        assert_eq!(e.status, 401);
        let client = HttpClient::new(&srv.http(), "").with_tls(pki.mtls(&pki.forged));
        refused_http(try_call(client).await, "UNAUTHENTICATED", ErrorKind::Unauthenticated, "client_certificate_refused");

        // No certificate and no token: the server's own refusal.
        let e = try_connect(&srv, "", pki.tls()).await.err().expect("no credential");
        assert_eq!((e.code.as_str(), e.kind, e.status), ("UNAUTHENTICATED", ErrorKind::Unauthenticated, 401), "{e}");

        sub.unsubscribe().await.unwrap();
        for s in [s, m, both] {
            s.close().await.unwrap();
        }
    });
}

/// `--mtls-mode required`: without a client certificate the handshake is
/// refused, whatever token the client carries; with one, the session
/// and HTTP calls go through as the certificate's principal.
#[test]
fn mtls_required() {
    let pki = Pki::new();
    let srv = pki.serve("server", Some("required"));
    runtime().block_on(async {
        let e = refused(
            try_connect(&srv, "writer-token", pki.tls()).await,
            "UNAUTHENTICATED",
            ErrorKind::Unauthenticated,
            "client_certificate_required",
        );
        assert!(e.message.contains("client certificate"), "{e}");
        let client = HttpClient::new(&srv.http(), "writer-token").with_tls(pki.tls());
        refused_http(try_call(client).await, "UNAUTHENTICATED", ErrorKind::Unauthenticated, "client_certificate_required");

        let m = try_connect(&srv, "", pki.mtls(&pki.writer)).await.unwrap_or_else(|e| panic!("connect with a client certificate: {e}"));
        assert_eq!((m.contract().principal.as_str(), m.contract().auth.as_str()), (CERT_WRITER, "mtls"));
        assert_eq!(m.publish(&note("required")).await.unwrap().status, Status::Accepted);
        let (_, v) = try_call(HttpClient::new(&srv.http(), "").with_tls(pki.mtls(&pki.writer))).await.unwrap();
        assert_eq!(v["contract"]["principal"], json!(CERT_WRITER));
        m.close().await.unwrap();
    });
}

/// A server whose certificate names another host: refused for the URL's
/// host, accepted when `server_name` names the certificate's.
#[test]
fn hostname_mismatch() {
    let pki = Pki::new();
    let srv = pki.serve("server-elsewhere", None);
    runtime().block_on(async {
        let e = refused(try_connect(&srv, "writer-token", pki.tls()).await, "TLS_FAILED", ErrorKind::Transport, "name_mismatch");
        assert!(e.message.contains("127.0.0.1"), "{e}");
        let client = HttpClient::new(&srv.http(), "writer-token").with_tls(pki.tls());
        refused_http(try_call(client).await, "TLS_FAILED", ErrorKind::Transport, "name_mismatch");

        let s = try_connect(&srv, "writer-token", pki.tls().server_name("pigeon.test")).await.unwrap();
        assert_eq!(s.contract().principal, TOKEN_WRITER);
        s.close().await.unwrap();
    });
}

/// The file forms name the file in their errors; a key that is not the
/// certificate's is refused when the configuration is built.
#[test]
fn tls_config_from_files() {
    let pki = Pki::new();
    let tls = TlsConfig::new().ca_file(pki.file("ca.pem")).unwrap().client_cert_files(pki.file("writer.pem"), pki.file("writer-key.pem"));
    assert!(tls.is_ok());
    let e = TlsConfig::new().client_cert_files(pki.file("writer.pem"), pki.file("stranger-key.pem")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    assert!(e.message.contains("writer.pem") && e.message.contains("stranger-key.pem"), "{e}");
    let e = TlsConfig::new().ca_file(pki.file("writer-key.pem")).unwrap_err();
    assert!(e.message.contains("writer-key.pem") && e.message.contains("no PEM certificate"), "{e}");
    assert!(!e.message.contains("PRIVATE KEY"), "an error never quotes a file: {e}");
}
