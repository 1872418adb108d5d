//! The handle's promises, with the process-wide cache counters: Device
//! sweeps and rebuilds compile nothing, a GraphConst change recompiles and
//! says why, set_device refuses what would break that, padding is invisible,
//! undeclared fields are never routed. One test at a time: the counters
//! are process-wide.

mod common;

use std::sync::Mutex;

use common::{dataset, tiny, Tiny};
use nitro_data::Dataset;
use nitro_markers::ExperimentFields;
use nitro_run::{total_compiles, Nitro, Schedule};

static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    nitro_run::set_config_report(false);
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn batch(n: usize) -> nitro_data::Batch {
    dataset(n, 9)
        .gather(&(0..n).collect::<Vec<_>>(), &["x", "y"])
        .unwrap()
}

#[test]
fn a_device_sweep_compiles_nothing() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    let b = batch(4);
    let base = n.predict(&b).unwrap()["output"].to_f32_vec();
    let before = total_compiles();
    for t in [0.5f32, 1.0, 1.5, 2.0] {
        n.set_device("temperature", t).unwrap();
        let out = n.predict(&b).unwrap()["output"].to_f32_vec();
        assert!((out[0] * t - base[0]).abs() < 1e-5);
        assert_eq!(n.device_value::<f32>("temperature").unwrap(), t);
    }
    assert_eq!(
        total_compiles(),
        before,
        "four Device values, zero compiles"
    );
}

#[test]
fn set_device_refusals_name_the_fix() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.knobs.schedule = vec![("blowup".into(), Schedule::Constant(0.0))];
    let mut n = Nitro::new(e).unwrap();
    let msg = |r: nitro_run::Result<()>| r.unwrap_err().to_string();
    let gc = msg(n.set_device("width", 3i32));
    assert!(
        gc.contains("GraphConst") && gc.contains("new Nitro"),
        "{gc}"
    );
    let host = msg(n.set_device("dir", 1.0f32));
    assert!(
        host.contains("Host") && host.contains("new Nitro"),
        "{host}"
    );
    let sched = msg(n.set_device("blowup", 1.0f32));
    assert!(
        sched.contains("schedule") && sched.contains("new Nitro"),
        "{sched}"
    );
    let dtype = msg(n.set_device("temperature", 2i32));
    assert!(
        dtype.contains("compile key") && dtype.contains("new Nitro"),
        "{dtype}"
    );
    let shape = msg(n.set_device("temperature", vec![1.0f32, 2.0]));
    assert!(shape.contains("compile key"), "{shape}");
    let unknown = msg(n.set_device("temprature", 1.0f32));
    assert!(
        unknown.contains("temprature") && unknown.contains("temperature"),
        "{unknown}"
    );
}

#[test]
fn a_rebuilt_handle_compiles_nothing_and_a_graph_const_change_says_why() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.width = 5.into();
    let mut n = Nitro::new(e).unwrap();
    n.predict(&batch(4)).unwrap();
    n.evaluate("test").unwrap();
    let before = total_compiles();
    let mut e = tiny(d.path());
    e.width = 5.into();
    e.dir = "elsewhere-but-host".into();
    let mut again = Nitro::with_data(e, n.data()).unwrap();
    again.predict(&batch(4)).unwrap();
    again.evaluate("test").unwrap();
    assert_eq!(total_compiles(), before, "same GraphConst values: all hits");
    assert!(again.compile_log().is_empty());

    let mut e = tiny(d.path());
    e.width = 6.into();
    let mut wider = Nitro::with_data(e, n.data()).unwrap();
    wider.predict(&batch(4)).unwrap();
    assert_eq!(total_compiles(), before + 1, "only predict recompiles");
    let why = &wider.compile_log()[0];
    assert!(
        why.contains("`width`") && why.contains("5") && why.contains("6"),
        "{why}"
    );
}

#[test]
fn padded_evaluation_equals_unpadded() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let run = |width: usize| {
        let mut e = tiny(d.path());
        e.batch = width;
        let mut n = Nitro::new(e).unwrap();
        (n.predict(&batch(10)).unwrap(), n.evaluate("test").unwrap())
    };
    let (exact_out, exact_metrics) = run(10); // test split has 10 rows
    let (padded_out, padded_metrics) = run(4); // 4 + 4 + 2 padded to 4
    assert_eq!(padded_out["output"].shape(), [10, 3]);
    assert_eq!(exact_out["output"], padded_out["output"]);
    assert_eq!(exact_metrics["acc"], padded_metrics["acc"]);
    // The loss is exact too: padded rows carry weight 0 (3+3+3+1 and 4+4+2).
    for width in [3, 4] {
        let (_, m) = run(width);
        let (a, b) = (exact_metrics["loss"], m["loss"]);
        assert!(
            (a - b).abs() < 1e-6 * a.abs().max(1.0),
            "width {width}: {a} vs {b}"
        );
    }
}

#[test]
fn undeclared_fields_are_never_routed() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let n = Nitro::new(tiny(d.path())).unwrap();
    assert_eq!(n.routed_fields(), ["x", "y"]);
}

#[test]
fn presets_record_their_name_and_overrides_win() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let mut recipe =
        Tiny::from_overrides(&[("width", nitro_markers::ConfigValue::Int(3))]).unwrap();
    recipe.experiment.dir = d.path().display().to_string();
    recipe.preset = Some("small".into());
    let n = Nitro::from_recipe(recipe).unwrap();
    assert_eq!(n.run_values().preset.as_deref(), Some("small"));
    assert_eq!(*n.experiment().width, 3);
}
