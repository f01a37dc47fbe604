//! The client's code tables held to the server's: every code of
//! clients/conformance/codes.json (made from the server's source by the Go
//! test there: each code with its HTTP status and its group, the Go `Err*`
//! sentinel it matches) has the server's status in [`http_status`] and a
//! kind meant for it.

mod common;

use common::conformance_dir;
use pigeon_client::{http_status, Error, ErrorKind};
use serde_json::Value;

struct ServerCode {
    code: String,
    status: u16,
    group: String,
}

fn server_codes() -> Vec<ServerCode> {
    let path = conformance_dir().join("codes.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("codes.json")).expect("codes.json is JSON");
    let codes: Vec<ServerCode> = v["codes"]
        .as_array()
        .expect("codes.json has codes")
        .iter()
        .map(|c| ServerCode {
            code: c["code"].as_str().expect("code").to_string(),
            status: c["status"].as_u64().expect("status") as u16,
            group: c["group"].as_str().expect("group").to_string(),
        })
        .collect();
    assert!(codes.len() > 50, "{} lists the server's codes", path.display());
    codes
}

#[test]
fn every_server_code_has_the_server_status() {
    let wrong: Vec<String> = server_codes()
        .iter()
        .filter(|c| http_status(&c.code) != c.status)
        .map(|c| format!("{}: http_status gives {}, the server {}", c.code, http_status(&c.code), c.status))
        .collect();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// A code `kind_of` (src/error.rs) does not list is [`ErrorKind::Denied`]:
/// refused by policy, nothing stored. That is the kind meant for the
/// server's group "denied" only; every other code must be listed there.
#[test]
fn every_server_code_has_a_kind_meant_for_it() {
    let wrong: Vec<String> = server_codes()
        .iter()
        .filter(|c| Error::new(&c.code, "m").kind == ErrorKind::Denied && c.group != "denied")
        .map(|c| format!("{} (server group {}) falls to ErrorKind::Denied: list it in kind_of", c.code, c.group))
        .collect();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}
