//! The escape suite's hostile HTTP clients against the connection layer, through the real `serve` (the others,
//! such as half-open connections, are in `escape.rs`).

use std::io::{Read, Write};
use std::time::Duration;

use super::support::{Env, Server};

/// A client holding `--max-connections` connections open gets no further connection served until it lets one go,
/// whether connections are served on threads of their own (`--http-threads`) or on the shared runtime: each
/// connection's place follows it to its thread, and is given back when it ends there.
#[test]
fn a_client_holding_every_connection_gets_no_more_served_until_it_lets_one_go() {
    let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    for threads in ["2", "0"] {
        let env = Env::new();
        let args = ["--max-connections", "4", "--http-threads", threads];
        let server = Server::start(env.home.path(), &args, &[]);
        let addr = server.base.trim_start_matches("http://").to_string();
        let mut held: Vec<std::net::TcpStream> = (0..4)
            .map(|n| {
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.write_all(healthz.as_bytes()).unwrap();
                let mut buf = [0u8; 512];
                let read = s.read(&mut buf).unwrap();
                let answer = String::from_utf8_lossy(&buf[..read]).to_string();
                assert!(
                    answer.starts_with("HTTP/1.1 200"),
                    "--http-threads {threads}, connection {n}: {answer}"
                );
                s
            })
            .collect();
        // The kernel takes a fifth connection; the server serves none while the four are open.
        let mut fifth = std::net::TcpStream::connect(&addr).unwrap();
        fifth
            .write_all(
                healthz
                    .replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
        fifth
            .set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let mut buf = [0u8; 512];
        let early = fifth.read(&mut buf);
        assert!(
            early.is_err(),
            "--http-threads {threads}: a fifth connection was served while four were held: {:?}",
            early.map(|n| String::from_utf8_lossy(&buf[..n]).to_string())
        );
        // Once one of the four goes, the fifth is served.
        drop(held.pop());
        fifth
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = String::new();
        let _ = fifth.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "--http-threads {threads}: the fifth connection, once one went: {answer:?}"
        );
    }
}
