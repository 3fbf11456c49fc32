//! `fencecheck run` against a lock service it cannot use says why, on every backend, in one line
//! and within the `--timeout` it was given: a port nothing listens on (refused), a host name that
//! does not resolve (DNS), and a host that takes no connection (silent: a listener whose accept
//! queue is full, as a partitioned host). Each is exit 69 and runs nothing.
#![cfg(feature = "backends")]

mod common;

use fencecheck_testkit::SilentListener;
use std::process::Command;
use std::time::{Duration, Instant};

/// A port on 127.0.0.1 nothing listens on (bound once, then closed).
fn refused_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `fencecheck run --lock SPEC --timeout 1s --name errors -- touch MARKER`: its exit status,
/// stderr, how long it took, and whether the command ran.
fn run(spec: &str) -> (Option<i32>, String, Duration, bool) {
    let dir = fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "run-errors");
    let marker = dir.join("ran");
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .env("XDG_STATE_HOME", &dir)
        .args(["run", "--lock", spec, "--timeout", "1s", "--name", "errors"])
        .args(["--", "touch", marker.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err, t0.elapsed(), marker.exists())
}

#[test]
fn an_unusable_lock_service_is_named_with_its_cause_within_the_timeout() {
    let silent = SilentListener::start();
    let silent = silent.addr().to_string();
    let refused = refused_port();
    let dns = "no-such-host.invalid:2379".to_string();
    // (cause, address, what the line must say)
    let causes: [(&str, &String, &[&str]); 3] = [
        ("refused", &refused, &["connection refused"]),
        ("dns", &dns, &["resolve", "lookup address"]),
        ("silent", &silent, &["within"]),
    ];
    for scheme in ["redis", "etcd", "zk", "raft"] {
        for (cause, address, words) in causes {
            let spec = format!("{scheme}://{address}");
            let (code, err, took, ran) = run(&spec);
            let line = err.trim();
            eprintln!("{spec} ({cause}): exit {code:?} after {took:?}: {line}");
            assert_eq!(code, Some(69), "{spec}: {line}");
            assert!(!ran, "{spec}: the command ran");
            assert_eq!(line.lines().count(), 1, "{spec}: {line}");
            let lower = line.to_lowercase();
            assert!(
                words.iter().any(|w| lower.contains(w)),
                "{spec} ({cause}): the line does not name the cause ({words:?}): {line}"
            );
            // One --timeout (1 s) to fail, a second at most to probe why, and the start.
            assert!(took < Duration::from_millis(3_500), "{spec}: took {took:?}");
        }
    }
}
