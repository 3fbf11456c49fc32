//! `fencecheck demo`: the story, run for real with threads, a real TTL and a real pause.

use super::UsageError;
use clap::Args;
use fencecheck::local::{FencedStore, LeaseLock};
use fencecheck::protocol::FencePolicy;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// Run the same story against TTL-only storage (no fencing) and watch it go wrong.
    #[arg(long)]
    no_fence: bool,
    /// The lease's time-to-live in milliseconds (worker-A's pause lasts three times as long).
    #[arg(long, value_name = "MS", default_value_t = 200)]
    ttl_ms: u64,
}

pub(super) fn run(args: DemoArgs) -> Result<ExitCode, UsageError> {
    if !(10..=10_000).contains(&args.ttl_ms) {
        return Err(UsageError(format!(
            "--ttl-ms {}: expected a lease time-to-live from 10 to 10000 milliseconds",
            args.ttl_ms
        )));
    }
    let ttl = Duration::from_millis(args.ttl_ms);
    let pause = ttl * 3;
    let policy = if args.no_fence {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    let lock = LeaseLock::new(ttl).map_err(|e| UsageError(format!("--ttl-ms: {e}")))?;
    let store = FencedStore::<&'static str>::with_policy(policy);
    println!(
        "two workers, one lease (ttl {} ms), storage {}",
        args.ttl_ms,
        if args.no_fence {
            "WITHOUT fencing (accepts every write)"
        } else {
            "with fencing tokens (rejects older tokens)"
        }
    );

    let (leased_tx, leased_rx) = mpsc::channel();
    let (written_tx, written_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let (lock, store) = (&lock, &store);
        s.spawn(move || {
            let guard = lock
                .try_acquire("worker-A")
                .expect("the lock is fresh, so worker-A's acquire succeeds");
            let token = guard.token();
            println!("worker-A leased, token {token}");
            println!(
                "worker-A pauses for {} ms (a GC pause, a stopped VM)",
                pause.as_millis()
            );
            leased_tx.send(()).expect("worker-B is listening");
            std::thread::sleep(pause);
            // Keep the story's order even on a loaded machine: A wakes after B has written.
            let _ = written_rx.recv_timeout(Duration::from_secs(30));
            println!(
                "worker-A wakes up, still believing it holds the lease (token {token}, expired: {})",
                guard.is_expired()
            );
            match store.write(token, "written-by-A") {
                Ok(()) => println!("ACCEPT worker-A token={token} value=written-by-A"),
                Err(stale) => println!(
                    "REJECT worker-A token={} (already saw {})",
                    stale.token, stale.highest
                ),
            }
        });
        s.spawn(move || {
            leased_rx.recv().expect("worker-A leases first");
            println!("worker-B waits for the lease...");
            let guard = lock
                .acquire_timeout("worker-B", ttl * 10)
                .expect("worker-A's lease expires within its ttl");
            let token = guard.token();
            println!("lease of worker-A expired; worker-B leased, token {token}");
            match store.write(token, "written-by-B") {
                Ok(()) => println!("ACCEPT worker-B token={token} value=written-by-B"),
                Err(stale) => println!(
                    "REJECT worker-B token={} (already saw {})",
                    stale.token, stale.highest
                ),
            }
            let _ = written_tx.send(());
        });
    });

    let value = match store.read() {
        Some((value, token)) => {
            println!("final value : {value} (token {token})");
            value
        }
        None => {
            println!("final value : empty");
            "empty"
        }
    };
    if value == "written-by-B" {
        println!(
            "The fencing token stopped worker-A's stale write: the newest lease's value stands."
        );
    } else {
        println!(
            "WRONG: worker-A's stale write overwrote worker-B's newer one. A TTL alone let two \
             workers write; run without --no-fence to see the fencing token stop it."
        );
    }
    Ok(ExitCode::SUCCESS)
}
