//! Store behaviour: rotation keeps the last N and best M with exact file
//! lists, configuration errors come early, foreign files are never touched,
//! and the async saver writes the same files.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use nitro_ckpt::{AsyncSaver, BestBy, Error, Goal, Store, StoreConfig};

fn config(keep_last: usize, best: Option<(Goal, usize)>) -> StoreConfig {
    StoreConfig {
        keep_last,
        best: best.map(|(goal, keep)| BestBy {
            metric: "val_loss".into(),
            goal,
            keep,
        }),
        known_metrics: vec!["val_loss".into(), "accuracy".into()],
    }
}

fn metrics(v: f64) -> BTreeMap<String, f64> {
    BTreeMap::from([
        ("val_loss".to_string(), v),
        ("accuracy".to_string(), 1.0 - v),
    ])
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn ck(step: u64) -> String {
    format!("ckpt-{step:012}.nckpt")
}

const MANIFEST: &str = "nitro-ckpt-store.cbor";

#[test]
fn keeps_last_n_and_best_m_by_metric() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), config(2, Some((Goal::Min, 2)))).unwrap();
    let losses = [
        (10, 0.9),
        (20, 0.2),
        (30, 0.5),
        (40, 0.1),
        (50, 0.7),
        (60, 0.8),
    ];
    for (step, loss) in losses {
        store
            .save(step, &common::sample(step, 8), &metrics(loss))
            .unwrap();
    }
    // Last two: 50, 60. Best two by min val_loss: 40 (0.1), 20 (0.2).
    assert_eq!(
        files(dir.path()),
        vec![ck(20), ck(40), ck(50), ck(60), MANIFEST.to_string()]
    );
    assert_eq!(store.latest().unwrap().unwrap().step, 60);
    let best = store.best().unwrap().unwrap();
    assert_eq!((best.step, best.metrics["val_loss"]), (40, 0.1));
    assert_eq!(
        common::load_stored(&best.path).unwrap(),
        common::sample(40, 8)
    );

    // Reopening keeps the history: the manifest survives.
    let mut store = Store::open(dir.path(), config(2, Some((Goal::Min, 2)))).unwrap();
    store
        .save(70, &common::sample(70, 8), &metrics(0.05))
        .unwrap();
    // Last two: 60, 70. Best two: 70 (0.05), 40 (0.1); 20 drops out.
    assert_eq!(
        files(dir.path()),
        vec![ck(40), ck(60), ck(70), MANIFEST.to_string()]
    );
}

#[test]
fn max_goal_and_keep_last_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), config(1, Some((Goal::Max, 1)))).unwrap();
    for (step, loss) in [(1, 0.3), (2, 0.9), (3, 0.6)] {
        store
            .save(step, &common::sample(step, 4), &metrics(loss))
            .unwrap();
    }
    assert_eq!(files(dir.path()), vec![ck(2), ck(3), MANIFEST.to_string()]);

    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), config(3, None)).unwrap();
    for step in 1..=5 {
        store
            .save(step, &common::sample(step, 4), &BTreeMap::new())
            .unwrap();
    }
    assert_eq!(
        files(dir.path()),
        vec![ck(3), ck(4), ck(5), MANIFEST.to_string()]
    );
    assert_eq!(store.best().unwrap(), None);
}

#[test]
fn configuration_errors_come_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = config(2, Some((Goal::Min, 1)));
    bad.best.as_mut().unwrap().metric = "val_los".into();
    let err = Store::open(dir.path(), bad).unwrap_err();
    assert!(matches!(err, Error::UnknownMetric { .. }));
    assert!(err.to_string().contains("val_los"), "{err}");
    assert!(matches!(
        Store::open(dir.path(), config(0, None)),
        Err(Error::Config(_))
    ));

    let mut store = Store::open(dir.path(), config(2, Some((Goal::Min, 1)))).unwrap();
    let err = store
        .save(
            1,
            &common::sample(1, 4),
            &BTreeMap::from([("accuracy".into(), 0.5)]),
        )
        .unwrap_err();
    assert!(matches!(err, Error::MissingMetric { step: 1, .. }), "{err}");
    assert!(store.latest().unwrap().is_none());
}

#[test]
fn never_deletes_files_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    // Foreign files, one of them named exactly like a checkpoint.
    for name in [ck(1), "notes.txt".to_string(), "ckpt-abc.nckpt".to_string()] {
        fs::write(dir.path().join(name), b"not ours").unwrap();
    }
    let mut store = Store::open(dir.path(), config(1, None)).unwrap();
    for step in 2..=4 {
        store
            .save(step, &common::sample(step, 4), &BTreeMap::new())
            .unwrap();
    }
    assert_eq!(
        files(dir.path()),
        vec![
            ck(1),
            ck(4),
            "ckpt-abc.nckpt".into(),
            MANIFEST.into(),
            "notes.txt".into()
        ]
    );
    // The foreign look-alike is listed but never taken when damaged.
    let steps: Vec<u64> = store.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(steps, vec![1, 4]);
    fs::write(dir.path().join(ck(5)), b"damaged").unwrap();
    let (stored, loaded) = store.load_latest().unwrap().unwrap();
    assert_eq!((stored.step, loaded), (4, common::sample(4, 4)));
}

#[test]
fn async_saver_writes_in_order_and_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(2, None)).unwrap();
    let saver = AsyncSaver::new(store, 1).unwrap();
    for step in 1..=4 {
        saver
            .submit(step, common::sample(step, 1000), metrics(0.1))
            .unwrap();
    }
    let (store, saved) = saver.finish().unwrap();
    assert_eq!(saved.len(), 4);
    assert_eq!(files(dir.path()), vec![ck(3), ck(4), MANIFEST.to_string()]);
    assert_eq!(
        common::load_stored(&store.latest().unwrap().unwrap().path).unwrap(),
        common::sample(4, 1000)
    );
}

#[test]
fn async_saver_reports_a_failed_save() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(2, Some((Goal::Min, 1)))).unwrap();
    let saver = AsyncSaver::new(store, 0).unwrap();
    // Lacks the ranking metric: the background save fails.
    saver
        .submit(1, common::sample(1, 4), BTreeMap::new())
        .unwrap();
    let err = saver.finish().unwrap_err();
    assert!(matches!(err, Error::MissingMetric { .. }), "{err}");
}

#[test]
fn fingerprint_differences_name_each_field() {
    use nitro_ckpt::{compare_fingerprint, ConfigValue, Value};
    let cv = |name: &str, cat: &str, v: Value| ConfigValue {
        name: name.into(),
        category: cat.into(),
        value: v,
    };
    let mut meta = common::sample(1, 1).meta;
    meta.config = vec![
        cv("width", "graph_const", Value::Int(128)),
        cv("lr", "device", Value::Float(0.1)),
        cv("old_only", "host", Value::Bool(true)),
    ];
    let now = [
        cv("width", "graph_const", Value::Int(256)),
        cv("lr", "device", Value::Float(0.1)),
        cv("new_only", "host", Value::Text("x".into())),
    ];
    let diffs = compare_fingerprint(&meta, "Sample", "fp-2", &now);
    let shown: Vec<String> = diffs.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        vec![
            "fingerprint: fp-1 -> fp-2",
            "new_only: <absent> -> \"x\"",
            "old_only: true -> <absent>",
            "width: 128 -> 256",
        ]
    );
    assert!(compare_fingerprint(&meta, "Sample", "fp-1", &meta.config).is_empty());
}

/// A manifest that is missing, cut short, flipped or edited (a changed
/// metric value that would steer best-M rotation) is rebuilt from the
/// checkpoints, with a warning naming it, and rotation goes on as before.
#[test]
fn a_missing_or_damaged_manifest_is_rebuilt_from_the_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || config(1, Some((Goal::Min, 1)));
    let mut store = Store::open(dir.path(), cfg()).unwrap();
    for (step, loss) in [(1, 0.5), (2, 0.1), (3, 0.9)] {
        store
            .save(step, &common::sample(step, 4), &metrics(loss))
            .unwrap();
    }
    assert!(store.rebuilt_manifest().is_none());
    drop(store);
    let manifest = dir.path().join(MANIFEST);
    let good = fs::read(&manifest).unwrap();
    let mut edited = good.clone();
    // The f64 0.1 of step 2, found by its bytes and changed to 0.9.
    let at = edited
        .windows(8)
        .position(|w| w == 0.1f64.to_be_bytes())
        .expect("the metric's bytes");
    edited[at..at + 8].copy_from_slice(&0.9f64.to_be_bytes());
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    let damages: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("missing", None),
        ("cut", Some(good[..good.len() / 2].to_vec())),
        ("empty", Some(vec![])),
        ("flipped", Some(flipped)),
        ("edited", Some(edited)),
        (
            "old format",
            Some(vec![0xa1, 0x65, b's', b't', b'e', b'p', b's', 0xa0]),
        ),
    ];
    for (what, bytes) in damages {
        match &bytes {
            Some(b) => fs::write(&manifest, b).unwrap(),
            None => fs::remove_file(&manifest).unwrap(),
        }
        let mut store = Store::open(dir.path(), cfg()).unwrap();
        let warning = store
            .rebuilt_manifest()
            .unwrap_or_else(|| panic!("{what}: not rebuilt"));
        assert!(
            warning.contains(&manifest.display().to_string()) && warning.contains("rebuilt"),
            "{what}: {warning}"
        );
        assert!(
            !warning.contains("Error {"),
            "{what}: a debug dump: {warning}"
        );
        // The true metrics came back: step 2 is still the best.
        assert_eq!(store.best().unwrap().unwrap().step, 2, "{what}");
        assert_eq!(store.load_latest().unwrap().unwrap().0.step, 3, "{what}");
        store.save(4, &common::sample(4, 4), &metrics(0.7)).unwrap();
        assert_eq!(
            files(dir.path()),
            vec![ck(2), ck(4), MANIFEST.to_string()],
            "{what}"
        );
        drop(store);
        // Back to the state the damage is applied to.
        fs::remove_file(dir.path().join(ck(4))).unwrap();
        let mut store = Store::open(dir.path(), cfg()).unwrap();
        assert!(
            store.rebuilt_manifest().is_none(),
            "{what}: the rebuilt one is used"
        );
        store.save(3, &common::sample(3, 4), &metrics(0.9)).unwrap();
        drop(store);
        fs::write(&manifest, &good).unwrap();
    }
}

#[test]
fn opening_removes_temporaries_of_dead_savers_only() {
    let dir = tempfile::tempdir().unwrap();
    // pid 0 is never a user process; this test's own pid is alive.
    let dead = [
        format!(".{}.tmp-0-3", ck(7)),
        format!(".{MANIFEST}.tmp-0-1"),
    ];
    let alive = format!(".{}.tmp-{}-9", ck(8), std::process::id());
    let foreign = ".notes.txt.tmp-0-1".to_string();
    for n in dead.iter().chain([&alive, &foreign]) {
        fs::write(dir.path().join(n), b"partial").unwrap();
    }
    let store = Store::open(dir.path(), config(2, None)).unwrap();
    let mut expect = vec![alive, foreign];
    if !cfg!(target_os = "linux") {
        expect.extend(dead); // liveness is judged by age there
    }
    expect.sort();
    assert_eq!(files(dir.path()), expect);
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn a_store_path_that_is_a_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run");
    fs::write(&file, b"x").unwrap();
    let err = Store::open(&file, config(2, None)).unwrap_err().to_string();
    assert!(
        err.contains(&file.display().to_string())
            && err.contains("is a file")
            && err.contains("name a directory"),
        "{err}"
    );
}

/// A kill between a save's rename and its manifest write leaves a
/// checkpoint the manifest lacks: the next open adopts it, so rotation
/// removes it in its turn instead of leaking it.
#[test]
fn a_saved_but_unrecorded_checkpoint_is_adopted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), config(2, None)).unwrap();
    store.save(1, &common::sample(1, 4), &metrics(0.5)).unwrap();
    let manifest = dir.path().join(MANIFEST);
    let before = fs::read(&manifest).unwrap();
    store.save(2, &common::sample(2, 4), &metrics(0.4)).unwrap();
    drop(store);
    fs::write(&manifest, before).unwrap(); // as if killed before recording 2
    let mut store = Store::open(dir.path(), config(2, None)).unwrap();
    assert!(
        store.rebuilt_manifest().is_none(),
        "the manifest was intact"
    );
    for step in 3..=4 {
        store
            .save(step, &common::sample(step, 4), &metrics(0.3))
            .unwrap();
    }
    assert_eq!(files(dir.path()), vec![ck(3), ck(4), MANIFEST.to_string()]);
}
