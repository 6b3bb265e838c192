//! Property: any branch round-trips through `to_dict` / `from_dict`
//! unchanged, in every mode that is read back (python, json and db), and
//! through the bytes entry points (`to_json_vec` / `from_json_slice`).

#[path = "../../../tests/support/arbitrary_branch.rs"]
mod arbitrary_branch;

use branch_core::{Branch, SerializationMode, ToDictOptions};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_mode_round_trips_unchanged(b in arbitrary_branch::branch(6)) {
        for mode in [SerializationMode::Python, SerializationMode::Json, SerializationMode::Db] {
            let opts = ToDictOptions::mode(mode);
            let written = b.to_dict(&opts).unwrap();
            let back = Branch::from_dict(&written).unwrap();
            prop_assert_eq!(back.to_dict(&opts).unwrap(), written.clone(), "{:?}", mode);
            prop_assert_eq!(back.id(), b.id());
            prop_assert_eq!(back.messages().len(), b.messages().len());
        }
    }

    #[test]
    fn bytes_round_trip_unchanged(b in arbitrary_branch::branch(6)) {
        let opts = ToDictOptions::default();
        let bytes = b.to_json_vec(&opts).unwrap();
        let back = Branch::from_json_slice(&bytes).unwrap();
        prop_assert_eq!(back.to_json_vec(&opts).unwrap(), bytes);
        prop_assert_eq!(back.to_dict(&opts).unwrap(), b.to_dict(&opts).unwrap());
    }
}
