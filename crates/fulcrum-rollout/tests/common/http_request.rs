//! Reading one HTTP request on a fake engine's side, for the test servers of
//! `fulcrum-rollout/tests` and `fulcrum/tests/hostile` (included by path).

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;

use serde_json::Value;

/// Reads one HTTP request from `stream`: its path and its JSON body (`Null` when it has none
/// or it is not JSON); `None` when the client went away first.
pub fn read_request(stream: &TcpStream) -> Option<(String, Value)> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        if h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    Some((path, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}
