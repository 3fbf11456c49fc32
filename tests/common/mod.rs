//! Helpers shared by the backend test crates.
#![allow(dead_code)]

pub mod contract;
pub mod faults;
pub mod lock_diff;

/// The path of example `name`'s binary, built when missing (`cargo test` builds every example,
/// but a run filtered to one test file does not).
pub fn example_bin(name: &str) -> std::path::PathBuf {
    // A test binary lives in target/<profile>/deps; examples in target/<profile>/examples.
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--profile", "test", "--example", name])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --example {name} failed");
    }
    path
}

/// Runs the `fencecheck` binary with `args`, in a fresh `XDG_STATE_HOME` (so that the token floor
/// of one test's runs does not meet another's).
pub fn fencecheck(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .env(
            "XDG_STATE_HOME",
            fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "state"),
        )
        .args(args)
        .output()
        .expect("run fencecheck")
}

/// `fencecheck run` on the lock service `flags` name, with a command that prints its token:
/// the token, after checking the run succeeded.
pub fn run_token(flags: &[&str]) -> u64 {
    let run = ["run", "--name", "job", "--ttl", "1s"];
    let echo = ["--", "sh", "-c", "echo $FENCECHECK_TOKEN"];
    let out = fencecheck(&[&run[..], flags, &echo].concat());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the command printed its token")
}

/// `fencecheck demo` on the lock service `flags` name, with in-memory fenced storage: the paused
/// worker's late write is rejected and the successor's value stays.
pub fn demo_rejects_the_paused_worker(flags: &[&str]) {
    let out = fencecheck(&[&["demo"][..], flags, &["--store", "memory"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("REJECT worker-A token="), "{text}");
    assert!(text.contains("final value : written-by-B"), "{text}");
}
