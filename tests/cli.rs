//! The command line as a user meets it: exit codes, output, JSON shape, and bad input.

use std::process::{Command, Output};

/// The command `fencecheck ARGS`, with a state directory of its own.
fn fencecheck_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fencecheck"));
    cmd.env(
        "XDG_STATE_HOME",
        fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "state"),
    )
    .args(args);
    cmd
}

fn fencecheck(args: &[&str]) -> Output {
    fencecheck_command(args).output().expect("run fencecheck")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn check_exits_0_and_shows_verdicts_and_the_timeline() {
    let out = fencecheck(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("214 of 214 verdicts match"), "{text}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for row in [
        [
            "ttl-only",
            "storage_in_lease_order",
            "always",
            "violated",
            "VIOLATED",
            "ok",
        ],
        [
            "fenced",
            "storage_in_lease_order",
            "always",
            "holds",
            "HOLDS",
            "ok",
        ],
        [
            "fenced",
            "single_believer",
            "always",
            "violated",
            "VIOLATED",
            "ok",
        ],
        [
            "redlock-restart",
            "single_majority_holder",
            "always",
            "violated",
            "VIOLATED",
            "ok",
        ],
        [
            "idempotent-job",
            "effect_exactly_once",
            "always",
            "holds",
            "HOLDS",
            "ok",
        ],
    ] {
        assert!(
            rows.iter().any(|r| r.starts_with(&row)),
            "missing {row:?} in\n{text}"
        );
    }
    assert!(text.contains("ttl-only / storage_in_lease_order: VIOLATED (expected), minimal counterexample in 7 steps:"));
    assert!(text
        .contains("7. client-0 writes with token 1: accepted  <- violates storage_in_lease_order"));
}

#[test]
fn a_flipped_expectation_makes_check_exit_1() {
    let out = fencecheck(&[
        "check",
        "fenced",
        "--expect",
        "fenced.storage_in_lease_order=violated",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("MISMATCH fenced / storage_in_lease_order: declared violated, found holds"),
        "{text}"
    );
}

#[test]
fn a_mutant_makes_check_exit_1() {
    let out = fencecheck(&["check", "fenced", "--mutant", "fence-accepts-older"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("fenced / storage_in_lease_order: VIOLATED (NOT EXPECTED)"));
}

/// The properties of `--json` output, flattened to (model object, property object) pairs.
fn json_properties(doc: &serde_json::Value) -> Vec<(&serde_json::Value, &serde_json::Value)> {
    doc["models"]
        .as_array()
        .expect("models is an array")
        .iter()
        .flat_map(|m| {
            m["properties"]
                .as_array()
                .expect("properties is an array")
                .iter()
                .map(move |p| (m, p))
        })
        .collect()
}

#[test]
fn json_is_the_models_json_schema_with_one_object_per_model_and_property() {
    let out = fencecheck(&["check", "ttl-only", "fenced", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc["schema_version"], fencecheck::report::SCHEMA_VERSION);
    assert_eq!(doc["all_match"], true);
    assert_eq!(doc["models"].as_array().unwrap().len(), 2);
    let rows = json_properties(&doc);
    assert_eq!(rows.len(), 13);
    for (model, row) in &rows {
        for key in [
            "model", "params", "states", "seconds", "complete", "symmetry",
        ] {
            assert!(model.get(key).is_some(), "{key} missing in {model}");
        }
        for key in [
            "property",
            "kind",
            "expected",
            "verdict",
            "matches",
            "counterexample",
        ] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
        assert!(["holds", "violated", "incomplete"].contains(&row["verdict"].as_str().unwrap()));
    }
    let find = |model: &str, property: &str| {
        rows.iter()
            .find(|(m, p)| m["model"] == model && p["property"] == property)
            .map(|(_, p)| *p)
            .unwrap()
    };
    let steps = find("ttl-only", "storage_in_lease_order")["counterexample"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(steps.len(), 7);
    assert_eq!(steps[6]["text"], "client-0 writes with token 1: accepted");
    assert_eq!(steps[6]["from"], "client-0");
    assert_eq!(steps[6]["to"], "storage");
    assert!(find("fenced", "storage_in_lease_order")["counterexample"].is_null());
}

#[test]
fn max_states_reports_incomplete_and_fails_unless_allowed() {
    let out = fencecheck(&["check", "fenced", "--max-states", "100", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = json_properties(&doc);
    let (model, row) = rows
        .iter()
        .find(|(_, p)| p["property"] == "storage_in_lease_order")
        .unwrap();
    assert_eq!(row["verdict"], "incomplete");
    assert_eq!(model["complete"], false);
    let allowed = fencecheck(&[
        "check",
        "fenced",
        "--max-states",
        "100",
        "--allow-incomplete",
    ]);
    assert_eq!(allowed.status.code(), Some(0));
    assert!(stdout(&allowed).contains("INCOMPLETE"));
    // Only the lean search keeps a bound on distinct states: Stateright's is refused by name.
    let engine = ["--engine", "stateright", "--max-states", "100"];
    let refused = fencecheck(&[&["check", "fenced"][..], &engine[..]].concat());
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("--engine stateright with --max-states"));
}

/// `check --clients N` with no model named checks every model declared for N clients and names
/// the skipped ones, with their sizes, in one line; a named model that does not take N is still
/// refused (the control: the size is not silently ignored).
#[test]
fn the_catalog_is_checked_at_the_size_asked() {
    let out = fencecheck(&["check", "--clients", "1"]);
    let (err, text) = (stderr(&out), stdout(&out));
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("check: --clients 1: 3 of 38 models checked; skipped, declared for other sizes: ttl-only (2-8), fenced (2-8),"),
        "{err}"
    );
    assert!(text.contains("15 of 15 verdicts match"), "{text}");
    assert!(text.contains("token-reset"), "{text}");
    assert!(!text.contains("ttl-only"), "{text}");
    // The reports mark the skipped models: JSON lists them, JUnit has a skipped case each.
    let junit = std::env::temp_dir().join(format!("fencecheck-skip-{}.xml", std::process::id()));
    let out = fencecheck(&[
        "check",
        "--clients",
        "1",
        "--json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let skipped = doc["skipped"].as_array().expect("a skipped list");
    assert_eq!(skipped.len(), 35, "{skipped:?}");
    assert_eq!(skipped[0]["model"], "ttl-only");
    assert_eq!(skipped[0]["reason"], "declared for 2-8 clients, not 1");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(
        xml.matches("<skipped message=\"declared for").count(),
        35,
        "{xml}"
    );
    let _ = std::fs::remove_file(&junit);
    let out = fencecheck(&["check", "fenced", "--clients", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn bad_input_gets_one_clear_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["check", "nosuch"],
            "error: unknown model 'nosuch'; valid models: ttl-only, fenced",
        ),
        (
            &["check", "--clients", "0"],
            "error: --clients 0: expected a number of clients from 1 to 8",
        ),
        (
            &["check", "--clients", "1000"],
            "error: --clients 1000: expected a number of clients from 1 to 8",
        ),
        (
            &["check", "--writes", "99"],
            "error: --writes 99: expected a number of writes per client from 1 to 4",
        ),
        (
            &["check", "--retries", "7"],
            "error: --retries 7: expected a number of retries per client from 0 to 3",
        ),
        (
            &["check", "--threads", "0"],
            "error: --threads 0: expected a number of checker threads from 1 to 64",
        ),
        (
            &["check", "--mutant", "evil"],
            "error: unknown mutant 'evil'; valid mutants: fence-accepts-older, token-reused",
        ),
        (
            &["check", "--expect", "fenced.nope=holds"],
            "has no property 'nope'",
        ),
        (
            &["check", "--expect", "garbage"],
            "expected MODEL.PROPERTY=holds or MODEL.PROPERTY=violated",
        ),
        (
            &["check", "--clients", "x"],
            "invalid value 'x' for '--clients <N>'",
        ),
        (&["check", "--bogus"], "unexpected argument '--bogus'"),
        (
            &["nosuchcommand"],
            "unrecognized subcommand 'nosuchcommand'",
        ),
        (&["explore", "nosuch"], "error: unknown model 'nosuch'"),
        #[cfg(feature = "backends")]
        (
            &["demo", "--ttl-ms", "0"],
            "error: --ttl-ms 0: expected a lease time-to-live from 10 to 10000 milliseconds",
        ),
        #[cfg(feature = "backends")]
        (
            &["demo", "--store", "redis"],
            "error: --store redis needs a lock on a server, such as --lock redis",
        ),
    ];
    // Port 0 is no server's port, on every kind of lock service.
    let locks = ["redis", "etcd", "zk", "raft"].map(|kind| format!("{kind}://127.0.0.1:0"));
    let port_zero: Vec<[&str; 7]> = locks
        .iter()
        .filter(|_| cfg!(feature = "backends"))
        .map(|lock| ["run", "--lock", lock, "--name", "x", "--", "true"])
        .collect();
    let port_zero = port_zero
        .iter()
        .map(|a| (&a[..], "127.0.0.1:0: port 0 is no server's port"));
    for (args, message) in cases.iter().copied().chain(port_zero) {
        let out = fencecheck(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}");
    }
}

#[test]
fn help_is_there_for_every_command() {
    for cmd in [
        &["--help"][..],
        &["check", "--help"],
        &["list", "--help"],
        &["explore", "--help"],
        #[cfg(feature = "backends")]
        &["demo", "--help"],
        #[cfg(feature = "backends")]
        &["run", "--help"],
        &["validate", "--help"],
    ] {
        let out = fencecheck(cmd);
        assert_eq!(out.status.code(), Some(0), "{cmd:?}");
        assert!(stdout(&out).contains("Usage: fencecheck"), "{cmd:?}");
    }
}

#[test]
fn list_names_every_model_and_its_expectations() {
    let out = fencecheck(&["list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("ttl-only  --  "));
    assert!(text.contains("fenced  --  "));
    assert!(text.contains("storage_in_lease_order   always     expected violated"));
    assert!(text.contains("storage_in_lease_order   always     expected holds"));
}

#[cfg(feature = "backends")]
#[test]
fn demo_shows_the_story_with_and_without_fencing() {
    let out = fencecheck(&["demo", "--ttl-ms", "50"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("ACCEPT worker-B token=2 value=written-by-B"),
        "{text}"
    );
    assert!(
        text.contains("REJECT worker-A token=1 (already saw 2)"),
        "{text}"
    );
    assert!(
        text.contains("final value : written-by-B (token 2)"),
        "{text}"
    );

    let out = fencecheck(&["demo", "--ttl-ms", "50", "--no-fence"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("ACCEPT worker-A token=1 value=written-by-A"),
        "{text}"
    );
    assert!(
        text.contains("final value : written-by-A (token 1)"),
        "{text}"
    );
    assert!(
        text.contains("WRONG: worker-A's stale write overwrote worker-B's newer one"),
        "{text}"
    );
}

#[test]
fn junit_file_is_written_beside_the_table() {
    let path = std::env::temp_dir().join(format!("fencecheck-junit-{}.xml", std::process::id()));
    let out = fencecheck(&[
        "check",
        "ttl-only",
        "fenced",
        "--junit",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let xml = std::fs::read_to_string(&path).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 13);
    assert!(xml.contains("failures=\"0\""));
    let _ = std::fs::remove_file(&path);

    let bad = fencecheck(&["check", "--junit", "/nonexistent-dir/x.xml"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("cannot write /nonexistent-dir/x.xml"));
}

#[test]
fn report_regenerates_the_files_and_keeps_bench_md_without_estimates() {
    let dir = std::env::temp_dir().join(format!("fencecheck-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bench.md"), "earlier results").unwrap();
    // A page with a benchmark chart from an earlier run.
    let charted = format!(
        "<svg aria-label=\"{}\"></svg>",
        fencecheck::report::BENCH_CHART_MARK
    );
    std::fs::write(dir.join("report.html"), &charted).unwrap();
    let empty = dir.join("no-criterion");
    let report = || {
        fencecheck(&[
            "report",
            "--out",
            dir.to_str().unwrap(),
            "--criterion",
            empty.to_str().unwrap(),
            "--models-doc",
            dir.join("docs/catalog.md").to_str().unwrap(),
        ])
    };
    let out = report();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("no criterion results under"));
    assert_eq!(
        std::fs::read_to_string(dir.join("docs/catalog.md")).unwrap(),
        fencecheck::report::catalog_markdown()
    );
    for f in ["models.json", "models.md", "report.html", "README.md"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("bench.md")).unwrap(),
        "earlier results"
    );
    // No results to draw a chart: the page that has one is kept.
    assert!(stderr(&out).contains("report.html is left as it was"));
    assert_eq!(
        std::fs::read_to_string(dir.join("report.html")).unwrap(),
        charted
    );
    // With the last results kept in bench.json, the page is redrawn with its chart.
    let kept = fencecheck::report::BenchResult {
        group: "acquire/uncontended".into(),
        function: "fenced".into(),
        median_ns: 200.0,
        elements: None,
        baseline: Some("floor".into()),
        ratio: Some(2.0),
        written: None,
        left_out: None,
        paired: None,
    };
    let json = serde_json::to_string(&vec![kept]).unwrap();
    std::fs::write(dir.join("bench.json"), json).unwrap();
    let out = report();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("<h2>Verdicts</h2>") && page.contains("acquire/uncontended"));
    assert!(page.contains(fencecheck::report::BENCH_CHART_MARK));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::process::Stdio;
    let mut child = fencecheck_command(&["list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// Whether the running process `pid` ignores SIGPIPE (signal 13: bit 12 of `SigIgn` in
/// /proc/PID/status).
#[cfg(all(target_os = "linux", feature = "backends"))]
fn ignores_sigpipe(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc");
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .expect("a SigIgn line");
    u64::from_str_radix(mask.trim(), 16).expect("a hex mask") & (1 << 12) != 0
}

/// A torture worker whose lock server or PostgreSQL closes its socket (a kill-server trial) must
/// get an error it reports, not die of SIGPIPE; the same goes for every command that talks to
/// servers. The control: `check`, which only prints, takes the default disposition so `| head`
/// ends it quietly, and this test sees the difference.
#[cfg(all(target_os = "linux", feature = "backends"))]
#[test]
fn commands_that_talk_to_servers_ignore_sigpipe_and_printing_ones_do_not() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let pg_url = format!(
        "postgres://fencecheck@{}/none",
        listener.local_addr().unwrap()
    );
    let spawn = |args: &[&str]| {
        fencecheck_command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fencecheck")
    };
    let mut worker = fencecheck_command(&["torture-worker"])
        .envs([
            ("FENCECHECK_LOCK", "redis://127.0.0.1:1"),
            ("FENCECHECK_PG", pg_url.as_str()),
            ("FENCECHECK_TABLE", "t"),
            ("FENCECHECK_NAME", "n"),
            ("FENCECHECK_OWNER", "w1"),
            ("FENCECHECK_TTL_MS", "1000"),
            ("FENCECHECK_INCREMENTS", "1"),
            ("FENCECHECK_THINK_MS", "0"),
            ("FENCECHECK_FENCE", "1"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fencecheck");
    // Once the worker connects to its (silent) PostgreSQL, main is long past the set-up.
    let started = Instant::now();
    let _conn = loop {
        match listener.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    worker.try_wait().unwrap().is_none(),
                    "the worker exited before connecting"
                );
                assert!(started.elapsed() < Duration::from_secs(30), "no connection");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    let worker_ignores = ignores_sigpipe(worker.id());
    worker.kill().unwrap();
    worker.wait().unwrap();
    assert!(
        worker_ignores,
        "a torture worker must survive a server closing its socket"
    );

    // The control: a long search, whose disposition turns to the default within seconds.
    let mut check = spawn(&[
        "check",
        "fenced",
        "--clients",
        "5",
        "--writes",
        "2",
        "--no-symmetry",
    ]);
    let started = Instant::now();
    let mut check_ignores = true;
    while check_ignores && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            check.try_wait().unwrap().is_none(),
            "the search ended early"
        );
        check_ignores = ignores_sigpipe(check.id());
    }
    check.kill().unwrap();
    check.wait().unwrap();
    assert!(!check_ignores, "check should take the default disposition");
}

#[test]
fn no_command_is_one_line_and_exit_2() {
    let out = fencecheck(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no command given") && err.contains("check"),
        "{err}"
    );
}

#[test]
fn sizes_a_model_is_not_declared_for_are_refused_naming_the_flag() {
    let out = fencecheck(&["check", "redlock", "--clients", "3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(
        err.trim(),
        "error: --clients 3: model redlock is declared for 2 clients"
    );
    // A size some models do not declare, with no model named: the ones that do are checked
    // (`the_catalog_is_checked_at_the_size_asked`). Named, a model that does not is refused
    // (above); a size every named model declares is checked, and every verdict matches at it.
    let out = fencecheck(&["check", "token-reset", "durable-token", "--clients", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// `validate` on hand-written trace files: explained (exit 0), not explained (exit 1, the event
/// named), and every bad input one line with exit 2.
#[test]
fn validate_replays_trace_files_and_names_bad_input() {
    let dir = fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "validate");
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    // A's lease (1 s) runs out; B is granted 1.5 s after A.
    let a = file(
        "a.trace",
        "# ttl-us 1000000 (lock \"x\")\n100\tA\tacquire-sent\n200\tA\tgranted 1\n",
    );
    let b = file(
        "b.trace",
        "# ttl-us 1000000\n1500000\tB\tacquire-sent\n1500300\tB\tgranted 2\n",
    );
    let out = fencecheck(&["validate", &a, &b]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("4 events from 2 clients in 2 files: explained by the model"),
        "{}",
        stdout(&out)
    );
    // The same files as 2 s leases: B's grant came while A's lease was live.
    let out = fencecheck(&["validate", &a, &b, "--ttl", "2s"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // The reason leads: the first line says which event and why.
    let first = text.lines().next().unwrap_or("");
    assert!(
        first.contains("NOT explained: event 4 cannot be explained by the model: ")
            && first.contains("it answers busy"),
        "{text}"
    );
    let other_ttl = file("c.trace", "# ttl-us 3000000\n");
    let no_ttl = file("d.trace", "10\tA\tacquire-sent\n");
    let bad_line = file("e.trace", "10\tA\tacquire-sent\n20 A granted 1\n");
    let bad_word = file("f.trace", "10\tA\tstolen 1\n");
    let empty = file("g.trace", "# nothing\n");
    let backwards = file("h.trace", "20\tA\tacquire-sent\n10\tA\tgranted 1\n");
    for (args, says) in [
        (vec![a.as_str(), other_ttl.as_str()], "disagree on the TTL"),
        (vec![no_ttl.as_str()], "no --ttl given"),
        (
            vec![bad_line.as_str(), "--ttl", "1s"],
            "e.trace:2: expected three",
        ),
        (
            vec![bad_word.as_str(), "--ttl", "1s"],
            "unknown observation",
        ),
        (vec![empty.as_str(), "--ttl", "1s"], "no events"),
        (vec![backwards.as_str(), "--ttl", "1s"], "time goes back"),
        (vec![a.as_str(), a.as_str()], "the same file as"),
        (vec!["/dev/zero", "--ttl", "1s"], "not a trace"),
        (vec![a.as_str(), "--ttl", "0s"], "more than 0"),
        (vec!["/nonexistent/x.trace", "--ttl", "1s"], "x.trace"),
    ] {
        let mut all = vec!["validate"];
        all.extend(args.iter().copied());
        let out = fencecheck(&all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
