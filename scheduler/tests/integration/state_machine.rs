//! Property: whatever sequence of moves callers request through the store, a node only ever
//! takes moves from the table, and a refused request changes nothing.

use crate::common;

use std::collections::BTreeMap;

use metal_store::{Store, nodes};
use metal_types::model::node::{Deadlines, NodeState, NodeTransition};
use proptest::prelude::*;
use time::macros::datetime;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn only_table_moves_happen(requests in proptest::collection::vec((0usize..9, 0usize..9), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let url = common::database_url().await.unwrap_or_else(|| Store::sqlite_url(dir.path()));
            let store = Store::open(&url).await.unwrap();
            let now = datetime!(2026-12-01 10:00:00 UTC);
            let new = nodes::NewNode { id: "n1".into(), boot_mac: None, pool_id: None, labels: BTreeMap::new(), taints: vec![], devices: vec![] };
            store.write(move |tx| nodes::insert(tx, &new, now)).await.unwrap().unwrap();
            let mut actual = NodeState::New;
            for (from, to) in requests {
                let request = NodeTransition {
                    from: NodeState::ALL[from],
                    to: NodeState::ALL[to],
                    generation: None,
                    owner: Some("prop".into()),
                    reason: None,
                };
                let asked = request.clone();
                let outcome = store.write(move |tx| nodes::transition(tx, "n1", &asked, &Deadlines::default(), now)).await;
                let stored = store.read(|conn| nodes::get(conn, "n1")).await.unwrap().unwrap().state;
                match outcome {
                    Ok(node) => {
                        assert!(request.from == actual && actual.can_move_to(request.to), "{actual} -> {} accepted", request.to);
                        assert_eq!(node.state, request.to);
                        actual = request.to;
                    }
                    Err(_) => assert!(request.from != actual || !actual.can_move_to(request.to), "{actual} -> {} refused", request.to),
                }
                assert_eq!(stored, actual);
            }
        });
    }
}
