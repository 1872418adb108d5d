//! The config report flags a scalar accessor whose value drifted since the
//! handle was built (the handle keeps the frozen value).

mod common;

use std::sync::atomic::Ordering;

use common::{tiny, ACCUM_OVERRIDE};
use nitro_run::Nitro;

#[test]
fn a_drifted_accessor_is_flagged_in_the_report() {
    nitro_run::set_config_report(false);
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.accum = 2;
    let n = Nitro::new(e).unwrap();
    let clean = n.config_report();
    assert!(clean.contains("accum 2"), "{clean}");
    assert!(!clean.contains('!'), "{clean}");
    ACCUM_OVERRIDE.store(4, Ordering::Relaxed);
    let text = n.config_report();
    assert!(
        text.contains(
            "! `accum(e)` was redefined: it returned 2 at construction and returns 4 now."
        ),
        "{text}"
    );
    assert_eq!(n.run_values().accum, 2, "the handle keeps the frozen value");
}
