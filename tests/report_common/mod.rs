//! What the report test crates share: the run's metadata and a fresh temporary directory.
#![allow(dead_code)]

use fencecheck::report::Meta;
use std::path::PathBuf;

pub fn meta() -> Meta {
    Meta {
        commit: "0123456789ab".into(),
        rustc: "rustc test".into(),
        cores: 2,
        cpu: "test cpu".into(),
        version: env!("CARGO_PKG_VERSION"),
    }
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fencecheck-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
