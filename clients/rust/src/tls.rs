//! TLS of `wss://` and `https://` connections: rustls with the ring
//! provider. The server is verified against the platform's root
//! certificates, or the CA bundle given; a client certificate and key
//! authenticate the client (mTLS: its SPIFFE ID becomes the principal,
//! docs/identity.md).

use crate::error::{Error, Result};
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, AlertDescription, CertificateError, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// How `wss://` and `https://` connections verify the server and
/// authenticate the client. Give it to
/// [`ConnectOptions::tls`](crate::ConnectOptions::tls) and
/// [`HttpClient::with_tls`](crate::http::HttpClient::with_tls); without
/// one, `TlsConfig::default()` applies: the platform's root certificates
/// verify the server, and no client certificate is sent.
///
/// ```no_run
/// # fn run() -> pigeon_client::Result<()> {
/// use pigeon_client::TlsConfig;
/// // A server whose certificate a private CA signed, and mTLS:
/// let tls = TlsConfig::new().ca_file("ca.pem")?.client_cert_files("orders.pem", "orders-key.pem")?;
/// # Ok(()) }
/// ```
///
/// The names follow the Go client's (`ws.TLSFiles{CA, Cert, Key}`) and the
/// CLI's flags (`--tls-ca`, `--tls-cert`, `--tls-key`). TLS 1.2 or 1.3;
/// there is no switch that turns verification off (a
/// [`from_rustls`](TlsConfig::from_rustls) configuration is used as given).
/// Clones share the rustls configuration built at the first connection,
/// which reconnections reuse.
#[derive(Clone, Default)]
pub struct TlsConfig {
    ca: Vec<CertificateDer<'static>>,
    platform_roots: Option<bool>,
    client: Option<Arc<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>>,
    server_name: Option<String>,
    custom: Option<Arc<ClientConfig>>,
    built: Arc<OnceLock<Arc<ClientConfig>>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_certificates", &self.ca.len())
            .field("platform_roots", &self.uses_platform_roots())
            .field("client_certificate", &self.client.is_some())
            .field("server_name", &self.server_name)
            .field("from_rustls", &self.custom.is_some())
            .finish()
    }
}

fn invalid(message: String) -> Error {
    Error::new("INVALID_ARGUMENT", message)
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| invalid(format!("{what} {}: {e}", path.display())))
}

/// The crypto provider: the process default when the application installed
/// one, else ring.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    rustls::crypto::CryptoProvider::get_default().cloned().unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The platform's root certificates, loaded once per process.
fn platform_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            Arc::new(roots)
        })
        .clone()
}

fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("{what}: not valid PEM ({e})")))?;
    if certs.is_empty() {
        return Err(invalid(format!("{what}: no PEM certificate")));
    }
    Ok(certs)
}

impl TlsConfig {
    /// The platform's root certificates verify the server; no client
    /// certificate. The same as `TlsConfig::default()`.
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    fn changed(mut self) -> TlsConfig {
        self.built = Arc::default();
        self
    }

    /// Trusts the certificate authorities of a PEM bundle to verify the
    /// server. Once a CA is given, only the CAs given verify the server
    /// (as the Go client's `--tls-ca`), unless
    /// [`platform_roots(true)`](TlsConfig::platform_roots). May be called
    /// more than once: the bundles add up. A bundle without a certificate
    /// is `INVALID_ARGUMENT`.
    pub fn ca_pem(mut self, pem: impl AsRef<[u8]>) -> Result<TlsConfig> {
        let certs = parse_certs(pem.as_ref(), "the CA bundle")?;
        let mut check = RootCertStore::empty();
        for c in &certs {
            check.add(c.clone()).map_err(|e| invalid(format!("the CA bundle: a certificate that cannot be a trust anchor ({e})")))?;
        }
        self.ca.extend(certs);
        Ok(self.changed())
    }

    /// [`ca_pem`](TlsConfig::ca_pem) of a file; an error names the file,
    /// never its contents.
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<TlsConfig> {
        let path = path.as_ref();
        let pem = read_file(path, "CA bundle")?;
        self.ca_pem(pem).map_err(|e| invalid(format!("{}: {}", path.display(), e.message)))
    }

    /// Whether the platform's root certificates verify the server too.
    /// Default: yes when no CA bundle is given, no when one is.
    pub fn platform_roots(mut self, on: bool) -> TlsConfig {
        self.platform_roots = Some(on);
        self.changed()
    }

    /// Presents a client certificate (mTLS): `cert_pem` holds the
    /// certificate, then the intermediates of its chain if any; `key_pem`
    /// its private key (PKCS#8, PKCS#1 or SEC1). With mTLS the server takes
    /// the principal from the certificate's SPIFFE ID, so the session's
    /// token may be empty. A key that does not match the certificate is
    /// `INVALID_ARGUMENT`.
    pub fn client_cert_pem(mut self, cert_pem: impl AsRef<[u8]>, key_pem: impl AsRef<[u8]>) -> Result<TlsConfig> {
        let chain = parse_certs(cert_pem.as_ref(), "the client certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_ref())
            .map_err(|e| invalid(format!("the client certificate's key: no PEM private key ({e})")))?;
        rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider())
            .map_err(|e| invalid(format!("the client certificate and its key: {e}")))?;
        self.client = Some(Arc::new((chain, key)));
        Ok(self.changed())
    }

    /// [`client_cert_pem`](TlsConfig::client_cert_pem) of two files; an
    /// error names the files, never their contents.
    pub fn client_cert_files(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<TlsConfig> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let (c, k) = (read_file(cert, "client certificate")?, read_file(key, "client key")?);
        self.client_cert_pem(c, k).map_err(|e| invalid(format!("{} with {}: {}", cert.display(), key.display(), e.message)))
    }

    /// The name the server's certificate must carry, and the SNI sent
    /// (default: the URL's host, a DNS name or an IP address).
    pub fn server_name(mut self, name: impl Into<String>) -> TlsConfig {
        self.server_name = Some(name.into());
        self
    }

    /// Uses a rustls configuration as given (its roots, verifier, client
    /// certificate resolver, protocol versions): for what the builder does
    /// not cover, such as certificates that rotate. Whatever verification
    /// it does is the client's; ALPN, if set, must allow `http/1.1`. Of
    /// the other settings only [`server_name`](TlsConfig::server_name)
    /// applies to it.
    pub fn from_rustls(config: Arc<ClientConfig>) -> TlsConfig {
        TlsConfig { custom: Some(config), ..TlsConfig::default() }
    }

    fn uses_platform_roots(&self) -> bool {
        self.custom.is_none() && self.platform_roots.unwrap_or(self.ca.is_empty())
    }

    /// The rustls configuration, built once.
    pub(crate) fn client_config(&self) -> Result<Arc<ClientConfig>> {
        if let Some(c) = &self.custom {
            return Ok(c.clone());
        }
        if let Some(c) = self.built.get() {
            return Ok(c.clone());
        }
        let roots = match (self.uses_platform_roots(), self.ca.is_empty()) {
            (true, true) => platform_roots(),
            (platform, _) => {
                let mut roots = if platform { (*platform_roots()).clone() } else { RootCertStore::empty() };
                for c in &self.ca {
                    roots.add(c.clone()).map_err(|e| invalid(format!("the CA bundle: {e}")))?;
                }
                Arc::new(roots)
            }
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(rustls::DEFAULT_VERSIONS)
            .map_err(|e| invalid(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let config = match &self.client {
            Some(c) => {
                builder.with_client_auth_cert(c.0.clone(), c.1.clone_key()).map_err(|e| invalid(format!("the client certificate: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(self.built.get_or_init(|| Arc::new(config)).clone())
    }

    /// The configuration of a secure URL without a `TlsConfig`: the
    /// platform roots, built once per process.
    pub(crate) fn default_ref() -> &'static TlsConfig {
        static DEFAULT: OnceLock<TlsConfig> = OnceLock::new();
        DEFAULT.get_or_init(TlsConfig::default)
    }

    /// Whether the roots that verify the server are empty (no platform
    /// roots found and no CA given), which a verification error mentions.
    fn no_roots(&self) -> bool {
        self.custom.is_none() && self.ca.is_empty() && (!self.uses_platform_roots() || platform_roots().is_empty())
    }
}

/// A connection to the server: plain TCP, or TLS over it.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

pub(crate) struct TlsConn {
    s: TlsStream<TcpStream>,
    /// A write that failed as the server closed, until the read that
    /// looks for the server's alert is done (see `poll_failed`).
    write_failed: Option<io::Error>,
}

impl TlsConn {
    /// Writes with `f`; a write that fails because the server closed the
    /// connection looks for the alert that says why first.
    fn poll_write_with<T>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Pin<&mut TlsStream<TcpStream>>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if self.write_failed.is_none() {
            match f(Pin::new(&mut self.s), cx) {
                Poll::Ready(Err(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    self.write_failed = Some(e)
                }
                p => return p,
            }
        }
        self.poll_failed(cx).map(Err)
    }

    /// The server's alert instead of the failed write's error: with TLS 1.3
    /// a server that refuses the client certificate sends its alert and
    /// closes after the client's handshake is done, so the client's next
    /// write may fail (broken pipe, reset) while the alert that says why
    /// waits to be read. The connection is closed or reset, so the read
    /// is ready at once.
    fn poll_failed(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let mut scratch = [0u8; 256];
        let mut buf = ReadBuf::new(&mut scratch);
        let alert = match Pin::new(&mut self.s).poll_read(cx, &mut buf) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(r)) if r.get_ref().is_some_and(|i| i.is::<rustls::Error>()) => Some(r),
            Poll::Ready(_) => None,
        };
        let e = self.write_failed.take().expect("a failed write");
        Poll::Ready(alert.unwrap_or(e))
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(&mut t.s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(t) => t.poll_write_with(cx, |s, cx| s.poll_write(cx, buf)),
        }
    }
    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => t.poll_write_with(cx, |s, cx| s.poll_write_vectored(cx, bufs)),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(t) => t.s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(t) => t.poll_write_with(cx, |s, cx| s.poll_flush(cx)),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(&mut t.s).poll_shutdown(cx),
        }
    }
}

/// Where a URL points: `secure` for `wss://` and `https://`, the host (a
/// DNS name or an IP address, without brackets) and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub secure: bool,
    pub host: String,
    pub port: u16,
    /// `host[:port]` as the URL has it (the Host header)
    pub authority: String,
}

impl Target {
    /// Parses `scheme://authority[/path][?query]`; the schemes are ws,
    /// http, wss and https.
    pub(crate) fn parse(url: &str) -> Result<Target> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid(format!("url {url:?} has no scheme")))?;
        let secure = match scheme.to_ascii_lowercase().as_str() {
            "ws" | "http" => false,
            "wss" | "https" => true,
            s => return Err(invalid(format!("url scheme {s:?} is not ws, wss, http or https"))),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| invalid(format!("url {url:?}: an IPv6 address without ']'")))?;
            (h, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(invalid(format!("url {url:?} has no host")));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| invalid(format!("url {url:?}: port {p:?} is not a number")))?,
            None if secure => 443,
            None => 80,
        };
        Ok(Target { secure, host: host.to_string(), port, authority: hostport.to_string() })
    }
}

/// What a TLS failure is reported with: the host dialed and whether a
/// client certificate was offered.
pub(crate) struct TlsContext {
    host: String,
    client_cert: bool,
    no_roots: bool,
}

/// Opens a TCP connection to `target` (TCP_NODELAY on), and for a secure
/// target the TLS session over it (`tls`, else the default).
pub(crate) async fn connect(target: &Target, tls: Option<&TlsConfig>) -> Result<(Stream, Option<TlsContext>)> {
    let tcp = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| Error::transport("SESSION_CLOSED", format!("cannot connect to {}: {e}", target.authority)))?;
    let _ = tcp.set_nodelay(true);
    if !target.secure {
        return Ok((Stream::Plain(tcp), None));
    }
    let tls = tls.unwrap_or_else(|| TlsConfig::default_ref());
    let config = tls.client_config()?;
    let name = tls.server_name.clone().unwrap_or_else(|| target.host.clone());
    let server_name =
        ServerName::try_from(name.clone()).map_err(|_| invalid(format!("{name:?} is not a valid DNS name or IP address for TLS")))?;
    let ctx = TlsContext { host: name, client_cert: config.client_auth_cert_resolver.has_certs(), no_roots: tls.no_roots() };
    match TlsConnector::from(config).connect(server_name, tcp).await {
        Ok(s) => Ok((Stream::Tls(Box::new(TlsConn { s, write_failed: None })), Some(ctx))),
        Err(e) => {
            Err(tls_error(&e, Some(&ctx)).unwrap_or_else(|| Error::transport("SESSION_CLOSED", format!("TLS with {}: {e}", ctx.host))))
        }
    }
}

/// The typed error of an I/O error that carries a TLS failure (None for
/// any other): the server's certificate not trusted (`TLS_FAILED`,
/// kind Transport, `details.tls` `unknown_issuer`, `name_mismatch`,
/// `expired`, `invalid_certificate`), the client certificate missing or
/// refused (`UNAUTHENTICATED`, `details.tls` `client_certificate_required`
/// or `client_certificate_refused`), or another TLS failure (`TLS_FAILED`,
/// `details.tls` `alert` or `failed`).
pub(crate) fn tls_error(e: &io::Error, ctx: Option<&TlsContext>) -> Option<Error> {
    let err = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    let host = ctx.map_or("the server", |c| c.host.as_str());
    let (code, tag, message) = match err {
        rustls::Error::InvalidCertificate(ce) => {
            let (tag, why) = match ce {
                CertificateError::UnknownIssuer => {
                    let hint = if ctx.is_some_and(|c| c.no_roots) {
                        "there are no root certificates to verify it with (none found on the platform); give the server's CA with TlsConfig::ca_pem or ca_file"
                    } else {
                        "give the server's CA with TlsConfig::ca_pem or ca_file"
                    };
                    ("unknown_issuer", format!("its certificate is signed by an unknown issuer ({hint})"))
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    ("name_mismatch", format!("its certificate is not valid for the name {host:?} ({err})"))
                }
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => {
                    ("expired", format!("its certificate is outside its validity period ({err})"))
                }
                _ => ("invalid_certificate", format!("{err}")),
            };
            ("TLS_FAILED", tag, format!("TLS: the server {host} was not verified: {why}"))
        }
        rustls::Error::AlertReceived(a)
            if matches!(
                a,
                AlertDescription::CertificateRequired
                    | AlertDescription::BadCertificate
                    | AlertDescription::UnsupportedCertificate
                    | AlertDescription::CertificateRevoked
                    | AlertDescription::CertificateExpired
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::UnknownCA
                    | AlertDescription::AccessDenied
            ) =>
        {
            if ctx.is_some_and(|c| c.client_cert) {
                ("UNAUTHENTICATED", "client_certificate_refused", format!("TLS: {host} refused the client certificate (alert {a:?})"))
            } else {
                (
                    "UNAUTHENTICATED",
                    "client_certificate_required",
                    format!(
                        "TLS: {host} refused the connection without a client certificate (alert {a:?}): it requires one (mTLS); give it with TlsConfig::client_cert_pem or client_cert_files"
                    ),
                )
            }
        }
        rustls::Error::AlertReceived(a) => ("TLS_FAILED", "alert", format!("TLS: {host} ended the connection (alert {a:?})")),
        other => ("TLS_FAILED", "failed", format!("TLS with {host} failed: {other}")),
    };
    let mut e = if code == "UNAUTHENTICATED" { Error::new(code, message) } else { tls_failed(message) };
    e.details.insert("tls".into(), tag.into());
    Some(e)
}

/// A TLS failure: kind Transport, status 503 (the server cannot be used
/// from here), like a connection that cannot be made.
fn tls_failed(message: String) -> Error {
    let mut e = Error::transport("TLS_FAILED", message);
    e.status = 503;
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn targets() {
        let t = |u: &str| Target::parse(u).unwrap();
        assert_eq!(
            t("ws://127.0.0.1:8787/v1/ws"),
            Target { secure: false, host: "127.0.0.1".into(), port: 8787, authority: "127.0.0.1:8787".into() }
        );
        assert_eq!(
            t("https://pigeon.example"),
            Target { secure: true, host: "pigeon.example".into(), port: 443, authority: "pigeon.example".into() }
        );
        assert_eq!(
            t("http://pigeon.example?x=1"),
            Target { secure: false, host: "pigeon.example".into(), port: 80, authority: "pigeon.example".into() }
        );
        assert_eq!(t("wss://[::1]:9/x"), Target { secure: true, host: "::1".into(), port: 9, authority: "[::1]:9".into() });
        assert_eq!(t("WSS://[::1]").port, 443);
        for bad in ["127.0.0.1:80", "ftp://x", "ws://", "ws://h:port", "wss://[::1"] {
            assert_eq!(Target::parse(bad).unwrap_err().code, "INVALID_ARGUMENT", "{bad}");
        }
    }

    #[test]
    fn bad_pem_is_invalid_argument() {
        for r in
            [TlsConfig::new().ca_pem("not pem"), TlsConfig::new().client_cert_pem("", ""), TlsConfig::new().ca_file("/nonexistent/ca.pem")]
        {
            let e = r.unwrap_err();
            assert_eq!((e.kind, e.code.as_str()), (ErrorKind::Invalid, "INVALID_ARGUMENT"), "{e}");
        }
        let e = TlsConfig::new().ca_file("/nonexistent/ca.pem").unwrap_err();
        assert!(e.message.contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn default_uses_platform_roots() {
        let t = TlsConfig::new();
        assert!(t.uses_platform_roots());
        assert!(t.client_config().is_ok());
        assert!(!TlsConfig::new().platform_roots(false).uses_platform_roots());
    }
}
