//! `fencecheck torture` stopped by a signal: SIGTERM or SIGINT ends the campaign within seconds
//! with exit 128 + N, the trials it finished stay stored, and every process it started (workers,
//! the throwaway redis-server and PostgreSQL) is gone. The control: SIGKILL, which no program can
//! catch, leaves the servers running, and this test sees them (then ends them by PID).
#![cfg(all(feature = "backends", target_os = "linux"))]

use fencecheck_testkit::{find_on_path, postgres_installed, servers_required, signal};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every process under `pid` now (children, their children, ...), with its command name.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut parents = std::collections::HashMap::<u32, Vec<u32>>::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the command name may hold spaces; split after it.
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        if let Some(ppid) = after.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
            parents.entry(ppid).or_default().push(p);
        }
    }
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for &c in parents.get(&p).into_iter().flatten() {
            let comm = std::fs::read_to_string(format!("/proc/{c}/comm")).unwrap_or_default();
            found.push((c, comm.trim().to_string()));
            todo.push(c);
        }
    }
    found
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, a)| a.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Starts a long campaign on throwaway servers and waits until its first trial is stored;
/// returns it, its report directory and every process under it.
fn campaign_under_way(label: &str) -> (Child, PathBuf, Vec<(u32, String)>) {
    let dir = fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), label);
    let child = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .args([
            "torture", "--lock", "redis", "--trials", "500", "--ttl-ms", "200",
        ])
        .arg("--report")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.with_extension("stderr")).unwrap())
        .spawn()
        .unwrap();
    let stored = dir.join("trials/001/verdict.txt");
    let since = Instant::now();
    while !stored.exists() {
        assert!(since.elapsed() < Duration::from_secs(90), "no trial stored");
        std::thread::sleep(Duration::from_millis(50));
    }
    let under = descendants(child.id());
    for server in ["redis-server", "postgres"] {
        assert!(
            under.iter().any(|(_, c)| c == server),
            "{server} not among {under:?}"
        );
    }
    (child, dir, under)
}

/// Waits up to `limit` for `child` to exit; its exit code, or its signal as 128 + N.
fn exited_within(child: &mut Child, limit: Duration) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let since = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        }
        assert!(since.elapsed() < limit, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn present(test: &str) -> bool {
    if find_on_path("redis-server").is_some() && postgres_installed() {
        return true;
    }
    assert!(
        !servers_required(),
        "{test}: redis-server or PostgreSQL missing"
    );
    eprintln!("SKIPPED {test}: redis-server or PostgreSQL not installed");
    false
}

#[test]
fn a_signal_stops_the_campaign_and_every_process_it_started() {
    if !present("torture stopped by a signal") {
        return;
    }
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let (mut child, dir, under) = campaign_under_way("torture-stop");
        signal(child.id(), sig).unwrap();
        let code = exited_within(&mut child, Duration::from_secs(30));
        assert_eq!(code, 128 + sig, "{name}");
        let stderr = std::fs::read_to_string(dir.with_extension("stderr")).unwrap();
        assert!(
            stderr.contains(&format!("interrupted by signal {sig}")),
            "{stderr}"
        );
        assert!(
            dir.join("trials/001/trace").exists(),
            "the finished trial stays"
        );
        let since = Instant::now();
        while under.iter().any(|(p, _)| alive(*p)) {
            let left: Vec<_> = under.iter().filter(|(p, _)| alive(*p)).collect();
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "{name}: still running: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{name}: exit {code}; {} processes it started, all gone",
            under.len()
        );
    }
}

/// The control: SIGKILL cannot be handled, so the servers outlive the campaign; the check above
/// would see them.
#[test]
fn the_control_sigkill_leaves_the_servers_behind() {
    if !present("torture killed (the control)") {
        return;
    }
    let (mut child, _dir, under) = campaign_under_way("torture-kill");
    let pid = child.id();
    signal(pid, libc::SIGKILL).unwrap();
    assert_eq!(exited_within(&mut child, Duration::from_secs(10)), 128 + 9);
    std::thread::sleep(Duration::from_millis(500));
    let left: Vec<_> = under.iter().filter(|(p, _)| alive(*p)).cloned().collect();
    // Clean up what the control left: by PID, then the servers' directories.
    for (p, comm) in &left {
        let sig = if comm == "postgres" {
            libc::SIGQUIT
        } else {
            libc::SIGKILL
        };
        let _ = signal(*p, sig);
    }
    for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("fencecheck-") && name.contains(&format!("-{pid}-")) {
            let _ = std::fs::remove_dir_all(Path::new(&entry.path()));
        }
    }
    assert!(
        left.iter().any(|(_, c)| c == "redis-server"),
        "a killed campaign's redis-server should outlive it: {left:?}"
    );
}
