//! The clocked world serves a request the busy lock service leaves waiting.

use super::writer::Writer;
use super::{Environment, Service, Timing};
use crate::check::{check_model, Options, Verdict};
use crate::models::Params;

/// A fenced token writer: asks, writes once with its token, releases.
const WRITER: Writer = Writer {
    writes: 1,
    retries: 0,
};

fn clients_finish(service: Service, horizon: u64, drops_unserved: bool) -> (Verdict, usize) {
    let env = Environment::new(WRITER)
        .instances(2)
        .service(service)
        .clocked(Timing {
            ttl: 3,
            drift: 0,
            horizon,
            pauses: false,
        });
    let mut world = env.build_clocked().expect("a valid environment");
    world.drops_unserved = drops_unserved;
    let run = check_model(
        "writer",
        &Params::sized(2, 1, 0),
        world,
        &Options::default(),
        &mut |_| {},
    )
    .expect("declared");
    let verdict = run
        .properties
        .iter()
        .find(|p| p.property == "clients_finish")
        .expect("checked")
        .verdict;
    (verdict, run.states)
}

#[test]
fn a_waiting_request_is_served_on_release_and_on_expiry() {
    let waiting = [
        ("default", Service::default()),
        ("etcd", Service::ETCD),
        ("zookeeper", Service::ZOOKEEPER),
    ];
    for (name, service) in waiting {
        for horizon in [5, 20] {
            let (served, _) = clients_finish(service, horizon, false);
            assert_eq!(served, Verdict::Holds, "{name}, horizon {horizon}");
            // Negative control: the world that lost a waiting request fails the same check.
            let (dropped, _) = clients_finish(service, horizon, true);
            assert_eq!(dropped, Verdict::Violated, "{name}, horizon {horizon}");
        }
    }
}
