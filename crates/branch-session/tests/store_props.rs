//! Property: any branch round-trips through the SQLite store unchanged
//! (`to_dict` of the loaded branch equals the saved one's, in full and
//! default options), including a second save after more turns.

#[path = "../../../tests/support/arbitrary_branch.rs"]
mod arbitrary_branch;
mod common;

use branch_core::{Message, ToDictOptions};
use branch_session::{BranchStore, SqliteStore};
use common::TempDir;
use proptest::prelude::*;

fn full() -> ToDictOptions {
    ToDictOptions {
        include_log_config: true,
        include_processor_config: true,
        ..ToDictOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn any_branch_round_trips_through_the_store(
        b in arbitrary_branch::branch(6),
        more in prop::collection::vec(arbitrary_branch::text(), 0..3),
    ) {
        let dir = TempDir::new("props");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = SqliteStore::open(dir.join("s.db")).await.unwrap();
            store.save(&b).await.unwrap();
            let loaded = store.load(b.id()).await.unwrap();
            for opts in [full(), ToDictOptions::default()] {
                prop_assert_eq!(loaded.to_dict(&opts).unwrap(), b.to_dict(&opts).unwrap());
            }
            // More turns, saved again over its own rows.
            let mut grown = loaded;
            let turn: Vec<Message> = more.into_iter().map(Message::assistant).collect();
            store.append_turn(grown.id(), &turn).await.unwrap();
            for m in turn {
                grown.msgs_mut().add_message(m);
            }
            let reloaded = store.load(b.id()).await.unwrap();
            prop_assert_eq!(reloaded.to_dict(&full()).unwrap(), grown.to_dict(&full()).unwrap());
            store.save(&grown).await.unwrap();
            let again = store.load(b.id()).await.unwrap();
            prop_assert_eq!(again.to_dict(&full()).unwrap(), grown.to_dict(&full()).unwrap());
            Ok(())
        })?;
    }
}
