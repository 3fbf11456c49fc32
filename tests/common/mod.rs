//! Helpers shared by the backend test crates.
#![allow(dead_code)]

pub mod contract;
pub mod faults;

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
