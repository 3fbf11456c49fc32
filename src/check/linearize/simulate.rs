//! Linearizable histories by construction, for tests and benchmarks.

use super::{apply, Answer, Call, Operation, Register};
use crate::protocol::Token;

/// A linearizable history by construction, for tests and benchmarks: `clients` clients per key
/// over `keys` keys make `operations` operations in all, each taking effect at one instant
/// between its invocation and completion (which overlap with other clients'), answered by the
/// register's rule in that order; one in a hundred writes never completes. Deterministic in
/// `seed`.
pub fn simulated_history(
    seed: u64,
    keys: u32,
    clients: u32,
    operations: usize,
) -> Vec<Operation<u64>> {
    simulated_lossy(seed, keys, clients, operations, 100)
}

/// [`simulated_history`] with one operation in `lost_every` never answered when it is a write
/// (`lost_every` 10: about one write in twenty).
pub fn simulated_lossy(
    seed: u64,
    keys: u32,
    clients: u32,
    operations: usize,
    lost_every: usize,
) -> Vec<Operation<u64>> {
    let mut rng = seed | 1;
    let mut next = move |bound: u64| {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound.max(1)
    };
    // (effect instant, index) per key; each client runs one operation at a time.
    let mut history = Vec::with_capacity(operations);
    let mut effects: Vec<(u64, usize)> = Vec::with_capacity(operations);
    let mut free_at = vec![0u64; (keys * clients) as usize];
    let mut tokens = vec![0u64; keys as usize];
    for n in 0..operations {
        let key = next(u64::from(keys)) as u32;
        let client = (key * clients + next(u64::from(clients)) as u32) as usize;
        let invoked = free_at[client] + next(5);
        let effect = invoked + 1 + next(10);
        let completed = effect + 1 + next(10);
        free_at[client] = completed;
        let call = if next(2) == 0 {
            Call::Read
        } else {
            // Mostly newer tokens, sometimes an older one (a paused holder's).
            let t = &mut tokens[key as usize];
            if next(8) == 0 && *t > 1 {
                Call::Write {
                    token: Token::new(*t - 1 - next(*t - 1)),
                    value: n as u64,
                }
            } else {
                *t += 1;
                Call::Write {
                    token: Token::new(*t),
                    value: n as u64,
                }
            }
        };
        effects.push((effect, n));
        history.push(Operation {
            key,
            call,
            invoked,
            completed: Some((completed, Answer::Accepted)),
        });
    }
    // Answer each operation by the rule, in the order of the instants they take effect.
    effects.sort_unstable();
    let mut registers: Vec<Register<u64>> = vec![None; keys as usize];
    for (_, n) in effects {
        let op = &mut history[n];
        let (answer, state) = apply(&registers[op.key as usize], &op.call);
        registers[op.key as usize] = state;
        let lost = matches!(op.call, Call::Write { .. }) && n % lost_every == lost_every - 1;
        op.completed = if lost {
            None
        } else {
            op.completed.take().map(|(t, _)| (t, answer))
        };
    }
    history
}

/// Plants a fault in `h`: a read in its second half, invoked after a write was stored, is
/// answered with nothing. Returns the read's index.
///
/// # Panics
/// When `h` has no stored write or no read after one in its second half.
pub fn plant_empty_read(h: &mut [Operation<u64>]) -> usize {
    let stored = h
        .iter()
        .filter_map(|o| match &o.completed {
            Some((t, Answer::Accepted)) => Some(*t),
            _ => None,
        })
        .min()
        .expect("a stored write");
    let r = (h.len() / 2..h.len())
        .find(|&i| matches!(h[i].call, Call::Read) && h[i].invoked > stored)
        .expect("a read after a stored write");
    if let Some((_, answer)) = &mut h[r].completed {
        *answer = Answer::Read(None);
    }
    r
}
