//! Symmetry reduction: clients are interchangeable, the lock service and storage stay in place.

use super::narrate::current_lease;
use super::{Client, Ghost, Msg, Node, NodeState, WorldState};
use crate::models::Symmetric;
use stateright::actor::{ActorModel, Id};
use stateright::{Rewrite, RewritePlan};

impl<C: Clone> Rewrite<Id> for NodeState<C> {
    fn rewrite<S>(&self, plan: &RewritePlan<Id, S>) -> Self {
        match self {
            NodeState::LockService { table, grants } => NodeState::LockService {
                table: table.map_owner(|owner| plan.rewrite(owner)),
                grants: *grants,
            },
            other => other.clone(),
        }
    }
}

impl Rewrite<Id> for Msg {
    fn rewrite<S>(&self, _plan: &RewritePlan<Id, S>) -> Self {
        self.clone()
    }
}

impl Rewrite<Id> for Ghost {
    fn rewrite<S>(&self, _plan: &RewritePlan<Id, S>) -> Self {
        self.clone()
    }
}

impl<C: Client, Cfg> Symmetric for ActorModel<Node<C>, Cfg, Ghost> {
    /// Sorts the clients by what distinguishes them: their state, whether the lock service's
    /// table names them, and the messages they have in flight. The lock service and the storage
    /// sort first and stay in place; every id inside the state is rewritten by the same
    /// permutation, so the result is an equivalent state.
    fn representative(state: &WorldState<C>) -> WorldState<C> {
        let owner = current_lease(state).map(|l| l.owner);
        // Each actor's messages in flight (sent by it: true), gathered in one pass.
        let mut msgs: Vec<Vec<(bool, &Msg)>> = vec![Vec::new(); state.actor_states.len()];
        for e in state.network.iter_all() {
            let (src, dst) = (usize::from(e.src), usize::from(e.dst));
            if let Some(m) = msgs.get_mut(src) {
                m.push((true, e.msg));
            }
            if dst != src {
                if let Some(m) = msgs.get_mut(dst) {
                    m.push((false, e.msg));
                }
            }
        }
        let keys: Vec<_> = state
            .actor_states
            .iter()
            .zip(msgs)
            .enumerate()
            .map(|(i, (s, mut msgs))| {
                msgs.sort();
                (&**s, owner == Some(Id::from(i)), msgs)
            })
            .collect();
        // The sort is stable: keys already in order give the identity, so the state is its own
        // representative and needs no rewriting.
        if keys.windows(2).all(|w| w[0] <= w[1]) {
            return state.clone();
        }
        let plan = RewritePlan::<Id, _>::from_values_to_sort(&keys);
        WorldState::<C> {
            actor_states: plan.reindex(&state.actor_states),
            network: state.network.rewrite(&plan),
            timers_set: plan.reindex(&state.timers_set),
            random_choices: plan.reindex(&state.random_choices),
            crashed: plan.reindex(&state.crashed),
            actor_storages: plan.reindex(&state.actor_storages),
            history: state.history.rewrite(&plan),
        }
    }
}
