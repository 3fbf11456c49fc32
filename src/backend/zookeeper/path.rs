//! Lock node names and paths: Curator's naming, and what ZooKeeper refuses in a path.

use super::{LOCK_NAME, SEQUENCE_LEN};
use crate::backend::contract::{validate_name, BackendError};

/// A node's name: the last part of its path.
pub(super) fn name_of(node: &str) -> &str {
    node.rsplit('/').next().unwrap_or_default()
}

/// The lock's contenders among `children`, lowest sequence first: Curator's rule (names that
/// contain `lock-`, ordered by the ten-digit suffix).
pub(super) fn contenders(mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| {
        c.contains(LOCK_NAME)
            && c.len() >= SEQUENCE_LEN
            && c.is_char_boundary(c.len() - SEQUENCE_LEN)
            && c[c.len() - SEQUENCE_LEN..].parse::<u32>().is_ok()
    });
    children.sort_by(|a, b| a[a.len() - SEQUENCE_LEN..].cmp(&b[b.len() - SEQUENCE_LEN..]));
    children
}

/// The lock's path for `name`: the name itself when it is an absolute ZooKeeper path, else
/// `/fencecheck/NAME`. Checks what ZooKeeper would refuse.
pub(super) fn lock_path(name: &str) -> Result<String, BackendError> {
    validate_name("lock name", name)?;
    let path = if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/fencecheck/{name}")
    };
    let bad = |reason: String| Err(BackendError::invalid("lock name", reason));
    if path.len() > 1 && path.ends_with('/') {
        return bad(format!(
            "{name:?} ends with '/'; expected a path such as /locks/nightly"
        ));
    }
    for part in path[1..].split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad(format!(
                "{name:?} has an empty, '.' or '..' path component; expected a path such as \
                 /locks/nightly"
            ));
        }
    }
    // The characters ZooKeeper refuses in a path (its PathUtils): controls, and what Java holds as
    // surrogates or private use (every character beyond U+FFFF, such as emoji).
    let refused = |c: char| {
        c <= '\u{1f}'
            || ('\u{7f}'..='\u{9f}').contains(&c)
            || ('\u{e000}'..='\u{f8ff}').contains(&c)
            || c >= '\u{fff0}'
    };
    if let Some(c) = path.chars().find(|&c| refused(c)) {
        return bad(format!(
            "{name:?} contains {c:?} (U+{:04X}), which ZooKeeper refuses in a path: control \
             characters, U+E000-U+F8FF and everything from U+FFF0 (emoji included)",
            u32::from(c)
        ));
    }
    if path == "/" || path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return bad(format!("{name:?} is reserved by ZooKeeper"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_paths_follow_zookeeper_rules() {
        assert_eq!(lock_path("nightly").unwrap(), "/fencecheck/nightly");
        assert_eq!(lock_path("/locks/nightly").unwrap(), "/locks/nightly");
        assert_eq!(lock_path("a/b").unwrap(), "/fencecheck/a/b");
        assert_eq!(lock_path("é-ü").unwrap(), "/fencecheck/é-ü");
        for refused in ["🔒", "a\u{fff5}b", "x\u{e000}"] {
            let e = lock_path(refused).unwrap_err().to_string();
            assert!(e.contains("ZooKeeper refuses"), "{e}");
        }
        for bad in ["/", "/a/", "/a//b", "a/../b", "/zookeeper/x", "", "a{b}"] {
            assert!(lock_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn contenders_are_curators_nodes_in_sequence_order() {
        let names = vec![
            "_c_b-lock-0000000003".to_string(),
            "_c_a-lock-0000000001".to_string(),
            "other-0000000000".to_string(),
            "_c_x-lock-notanumber".to_string(),
            "lock-0000000002".to_string(),
        ];
        assert_eq!(
            contenders(names),
            [
                "_c_a-lock-0000000001",
                "lock-0000000002",
                "_c_b-lock-0000000003"
            ]
        );
        assert_eq!(
            name_of("/fencecheck/x/_c_a-lock-0000000001"),
            "_c_a-lock-0000000001"
        );
    }
}
