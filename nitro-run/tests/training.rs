//! The training loop's behaviours: accumulation, clipping, AdamW, NaN stop,
//! early stopping, setup errors, checkpoints and exact resume.

mod common;

use common::{bits, tiny, Knobs};
use nitro_run::{Nitro, Optimizer, RunError, Schedule, ShortBatch};

fn quiet() {
    nitro_run::set_config_report(false);
}

fn params_f32(n: &Nitro<common::Tiny>) -> Vec<Vec<f32>> {
    n.params().values().map(|a| a.to_f32_vec()).collect()
}

#[test]
fn accum_k_at_b_equals_accum_1_at_k_times_b_for_sgd() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let run = |batch: usize, accum: usize| {
        let mut e = tiny(d.path());
        e.batch = batch;
        e.accum = accum;
        e.epochs = 1;
        e.n = 32;
        let mut n = Nitro::new(e).unwrap();
        let r = n.train().unwrap();
        (params_f32(&n), r.steps)
    };
    let (a, sa) = run(4, 2);
    let (b, sb) = run(8, 1);
    assert_eq!((sa, sb), (4, 4), "one update per window");
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        assert!((x - y).abs() < 1e-5, "{x} vs {y}");
    }
}

#[test]
fn clipping_scales_the_update_to_the_global_norm() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let step = |clip: Option<f64>| {
        let mut e = tiny(d.path());
        e.n = 4;
        e.epochs = 1;
        e.knobs = Knobs {
            optimizer: Some(Optimizer::sgd(1.0)),
            clip,
            ..Knobs::default()
        };
        let mut n = Nitro::new(e).unwrap();
        let before = params_f32(&n);
        n.train().unwrap();
        let after = params_f32(&n);
        before
            .iter()
            .flatten()
            .zip(after.iter().flatten())
            .map(|(b, a)| (b - a) as f64)
            .collect::<Vec<f64>>()
    };
    // With lr 1 the unclipped update is the gradient itself.
    let grad = step(None);
    let norm = grad.iter().map(|g| g * g).sum::<f64>().sqrt();
    let max_norm = norm / 4.0;
    let clipped = step(Some(max_norm));
    for (g, c) in grad.iter().zip(&clipped) {
        assert!((g * max_norm / norm - c).abs() < 1e-5, "{g} {c}");
    }
    let loose = step(Some(norm * 10.0));
    for (g, c) in grad.iter().zip(&loose) {
        assert!((g - c).abs() < 1e-6);
    }
}

#[test]
fn adamw_decay_is_decoupled_from_the_gradient() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let (lr, wd) = (0.01, 0.5);
    let run = |opt: Optimizer| {
        let mut e = tiny(d.path());
        e.n = 4;
        e.epochs = 1;
        e.knobs.optimizer = Some(opt);
        let mut n = Nitro::new(e).unwrap();
        let p0 = params_f32(&n);
        n.train().unwrap();
        (p0, params_f32(&n))
    };
    let (p0, adam) = run(Optimizer::adam(lr));
    let (_, adamw) = run(Optimizer::adamw(lr, wd));
    // Decoupled: p_w = p_adam - lr * wd * p0 exactly (one step).
    for ((p, a), w) in p0
        .iter()
        .flatten()
        .zip(adam.iter().flatten())
        .zip(adamw.iter().flatten())
    {
        let want = a - (lr * wd) as f32 * p;
        assert!((want - w).abs() < 1e-6, "{want} vs {w}");
    }
    // Adam + L2 would fold wd*p into the gradient, whose first Adam step is
    // lr * sign(g + wd p): a different result wherever wd*p matters.
    assert_ne!(adam, adamw);
}

#[test]
fn a_non_finite_loss_stops_at_that_step_with_params_from_the_step_before() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    // blowup = 0 * inf^(t / 2): 0 for updates 1-2, NaN from update 3.
    let mut e = tiny(d.path());
    e.knobs.schedule = vec![(
        "blowup".into(),
        Schedule::Step {
            initial: 0.0,
            gamma: f64::INFINITY,
            every: 2,
        },
    )];
    let mut n = Nitro::new(e).unwrap();
    let err = n.train().unwrap_err();
    assert!(
        matches!(
            err,
            RunError::NonFiniteLoss {
                step: 3,
                epoch: 0,
                last_good: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("step 3"), "{err}");
    let d2 = tempfile::tempdir().unwrap();
    let mut reference = Nitro::new(tiny(d2.path())).unwrap();
    reference.stop_after(2);
    reference.train().unwrap();
    assert_eq!(bits(&n), bits(&reference));
}

#[test]
fn early_stopping_on_a_planted_plateau() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.epochs = 10;
    // An update far below f32 resolution: the loss never moves (lr 0 is
    // refused as a setting).
    e.knobs.optimizer = Some(Optimizer::sgd(1e-30));
    e.knobs.val = 8;
    e.knobs.stop_on = Some(("val_loss".into(), 2));
    let mut n = Nitro::new(e).unwrap();
    let r = n.train().unwrap();
    assert!(r.early_stopped);
    assert_eq!(r.epochs, 3, "best at epoch 1, then two without improvement");
}

/// The stopper is not saved but replayed over the checkpoint's history:
/// a run interrupted between its best epoch and its stop stops where the
/// uninterrupted run did, and a finished (early-stopped) run resumed
/// trains nothing.
#[test]
fn a_resumed_run_early_stops_where_the_uninterrupted_run_did() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let plateau = || {
        let mut e = tiny(d.path());
        e.epochs = 10;
        e.knobs.optimizer = Some(Optimizer::sgd(1e-30));
        e.knobs.val = 8;
        e.knobs.stop_on = Some(("val_loss".into(), 2));
        e
    };
    let mut first = Nitro::new(plateau()).unwrap();
    first.stop_after(25); // mid-epoch 3 (10 updates per epoch): one bad epoch seen
    assert!(first.train().unwrap().interrupted);
    let mut resumed = Nitro::new(plateau()).unwrap();
    assert!(resumed.resume().unwrap().is_some());
    let r = resumed.train().unwrap();
    assert!(r.early_stopped, "{r:?}");
    assert_eq!(
        resumed.step(),
        30,
        "stops after epoch 3, as the uninterrupted run"
    );
    let mut again = Nitro::new(plateau()).unwrap();
    assert!(again.resume().unwrap().is_some());
    let r = again.train().unwrap();
    assert!(r.early_stopped && r.epochs == 0, "{r:?}");
    assert_eq!(again.step(), 30);
}

#[test]
fn an_unknown_monitored_metric_is_a_setup_error() {
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.knobs.val = 8;
    e.knobs.stop_on = Some(("val_acuracy".into(), 2));
    let err = Nitro::new(e).err().expect("a typo is refused at setup");
    let msg = err.to_string();
    assert!(
        msg.contains("val_acuracy") && msg.contains("val_acc"),
        "{msg}"
    );
}

#[test]
fn schedules_match_their_closed_forms() {
    let total = 100;
    let c = Schedule::Cosine {
        peak: 1.0,
        floor: 0.1,
        warmup: 10,
    };
    assert!((c.value(0, total) - 0.1).abs() < 1e-12);
    assert!((c.value(9, total) - 1.0).abs() < 1e-12);
    assert!((c.value(10, total) - 1.0).abs() < 1e-12);
    let mid = 0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * 0.5).cos());
    assert!((c.value(55, total) - mid).abs() < 1e-12);
    assert!((c.value(100, total) - 0.1).abs() < 1e-12);
    let w = Schedule::LinearWarmup {
        peak: 2.0,
        warmup: 4,
    };
    assert_eq!(
        (0..6).map(|t| w.value(t, total)).collect::<Vec<_>>(),
        [0.5, 1.0, 1.5, 2.0, 2.0, 2.0]
    );
    let s = Schedule::Step {
        initial: 1.0,
        gamma: 0.5,
        every: 10,
    };
    assert_eq!(
        [s.value(0, 1), s.value(9, 1), s.value(10, 1), s.value(25, 1)],
        [1.0, 1.0, 0.5, 0.25]
    );
    let o = Schedule::one_cycle(1.0);
    assert!((o.value(0, total) - 1.0 / 25.0).abs() < 1e-12);
    assert!((o.value(30, total) - 1.0).abs() < 1e-12);
    assert!((o.value(100, total) - 1e-4).abs() < 1e-12);
    assert_eq!(Schedule::Constant(3.0).value(77, total), 3.0);
}

#[test]
fn a_scheduled_device_field_is_fed_per_update() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.epochs = 1;
    e.n = 12;
    e.knobs.schedule = vec![(
        "temperature".into(),
        Schedule::LinearWarmup {
            peak: 2.0,
            warmup: 4,
        },
    )];
    let mut n = Nitro::new(e).unwrap();
    n.train().unwrap();
    // 3 updates: the last used t = 2, i.e. 2.0 * 3 / 4.
    assert_eq!(n.device_value::<f32>("temperature").unwrap(), 1.5);
}

#[test]
fn four_hooks_train_validate_and_checkpoint() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.knobs.val = 8;
    let mut n = Nitro::new(e).unwrap();
    let r = n.train().unwrap();
    assert_eq!(r.epochs, 2);
    assert!(n.history()[1].1.contains_key("val_loss"));
    assert!(n.history()[1].1.contains_key("val_acc"));
    let saved: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert!(!saved.is_empty(), "checkpoints in the run dir");
}

#[test]
fn interrupted_and_resumed_run_is_bit_identical() {
    quiet();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut e = tiny(da.path());
    e.knobs.optimizer = Some(Optimizer::adam(0.01));
    let mut full = Nitro::new(e).unwrap();
    full.train().unwrap();

    let make = || {
        let mut e = tiny(db.path());
        e.knobs.optimizer = Some(Optimizer::adam(0.01));
        Nitro::new(e).unwrap()
    };
    let mut first = make();
    first.stop_after(13); // mid-epoch 2 (10 updates per epoch)
    assert!(first.train().unwrap().interrupted);
    let mut resumed = make();
    assert!(resumed.resume().unwrap().is_some());
    assert_eq!(resumed.step(), 13);
    resumed.train().unwrap();
    assert_eq!(bits(&resumed), bits(&full));
}

#[test]
fn resume_with_a_changed_graph_const_names_the_field() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    n.stop_after(1);
    n.train().unwrap();
    let mut e = tiny(d.path());
    e.width = 16.into();
    let mut other = Nitro::new(e).unwrap();
    let err = other.resume().unwrap_err().to_string();
    assert!(err.contains("`width`") && err.contains("8 -> 16"), "{err}");
}

#[test]
fn a_padded_with_mask_final_batch_updates_exactly_like_its_real_samples() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let run = |n: usize, batch: usize, short: ShortBatch, optimizer: Optimizer| {
        let mut e = tiny(d.path());
        e.n = n;
        e.batch = batch;
        e.epochs = 1;
        e.knobs = Knobs {
            optimizer: Some(optimizer),
            short,
            ..Knobs::default()
        };
        let mut nitro = Nitro::new(e).unwrap();
        let r = nitro.train().unwrap();
        let train_steps = nitro
            .compile_log()
            .iter()
            .filter(|w| w.contains("train_step"))
            .count();
        assert!(train_steps <= 1, "one program: {:?}", nitro.compile_log());
        (params_f32(&nitro), r.steps)
    };
    for optimizer in [Optimizer::sgd(0.5), Optimizer::adam(0.01)] {
        for real in [1, 3] {
            // One update on `real` samples padded to width 4, against the
            // same samples in an unpadded batch of width `real`.
            let (padded, s1) = run(real, 4, ShortBatch::PadWithMask, optimizer);
            let (exact, s2) = run(real, real, ShortBatch::Drop, optimizer);
            assert_eq!((s1, s2), (1, 1));
            for (x, y) in padded.iter().flatten().zip(exact.iter().flatten()) {
                assert!((x - y).abs() < 1e-5, "real {real}: {x} vs {y}");
            }
        }
    }
    // 10 samples at width 4: 4 + 4 + 2 (padded) is three updates, one program.
    let (_, steps) = run(10, 4, ShortBatch::PadWithMask, Optimizer::sgd(0.1));
    assert_eq!(steps, 3);
}

#[test]
fn a_partial_accumulation_window_is_normalised_by_its_real_size() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    // 12 samples at width 4 with accum 2: windows of 2 and 1 micro-batches.
    // The same samples at width 8 (PadWithMask, exact): batches of 8 and 4.
    // Equal updates need the partial window weighted 1/1, not 1/accum.
    let run = |batch: usize, accum: usize, short: ShortBatch| {
        let mut e = tiny(d.path());
        e.n = 12;
        e.batch = batch;
        e.accum = accum;
        e.epochs = 1;
        e.knobs = Knobs {
            optimizer: Some(Optimizer::sgd(0.5)),
            short,
            ..Knobs::default()
        };
        let mut n = Nitro::new(e).unwrap();
        let r = n.train().unwrap();
        (params_f32(&n), r.steps)
    };
    let (windows, s1) = run(4, 2, ShortBatch::Drop);
    let (wide, s2) = run(8, 1, ShortBatch::PadWithMask);
    assert_eq!((s1, s2), (2, 2));
    for (x, y) in windows.iter().flatten().zip(wide.iter().flatten()) {
        assert!((x - y).abs() < 1e-5, "{x} vs {y}");
    }
}

fn saved_steps(dir: &std::path::Path) -> Vec<u64> {
    let mut steps: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|f| {
            let name = f.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("ckpt-")?
                .strip_suffix(".nckpt")?
                .parse()
                .ok()
        })
        .collect();
    steps.sort();
    steps
}

#[test]
fn checkpoints_rotate_keep_last_n_and_best_m() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.epochs = 1;
    e.knobs.every = Some(nitro_run::Cadence::Steps(1));
    e.knobs.keep_last = Some(2);
    let mut n = Nitro::new(e).unwrap();
    n.train().unwrap();
    assert_eq!(saved_steps(d.path()), [9, 10], "the newest 2 of 10");

    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.epochs = 4;
    e.knobs.val = 12;
    e.knobs.optimizer = Some(Optimizer::sgd(2.0)); // a bumpy val_loss
    e.knobs.keep_last = Some(1);
    e.knobs.best = Some(("val_loss".into(), 1, false));
    let mut n = Nitro::new(e).unwrap();
    n.train().unwrap();
    let (epoch, _) = n
        .history()
        .iter()
        .min_by(|a, b| a.1["val_loss"].total_cmp(&b.1["val_loss"]))
        .unwrap();
    let mut expected = vec![(epoch + 1) * 10, 40];
    expected.dedup();
    assert_eq!(saved_steps(d.path()), expected, "newest + best by val_loss");
}

#[test]
fn a_device_value_restored_on_resume_is_written_back() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    n.set_device("temperature", 2.5f32).unwrap();
    n.stop_after(3);
    n.train().unwrap();
    let mut resumed = Nitro::new(tiny(d.path())).unwrap();
    assert_eq!(resumed.device_value::<f32>("temperature").unwrap(), 1.0);
    resumed.resume().unwrap().unwrap();
    assert_eq!(resumed.device_value::<f32>("temperature").unwrap(), 2.5);
    assert_eq!(*resumed.experiment().temperature, 2.5);
}

#[test]
fn run_values_the_framework_owns_are_validated_at_construction() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let refused = |set: &dyn Fn(&mut common::Tiny), parts: &[&str]| {
        let mut e = tiny(d.path());
        set(&mut e);
        let msg = Nitro::new(e).err().expect("refused").to_string();
        for p in parts {
            assert!(msg.contains(p), "`{p}` missing from: {msg}");
        }
    };
    refused(
        &|e| e.knobs.optimizer = Some(Optimizer::sgd(-1.0)),
        &["optimizer (lr)", "-1"],
    );
    refused(
        &|e| e.knobs.optimizer = Some(Optimizer::adam(f64::NAN)),
        &["optimizer (lr)", "NaN"],
    );
    refused(&|e| e.knobs.clip = Some(0.0), &["clip", "greater than 0"]);
    refused(&|e| e.batch = 0, &["batch_size", "at least 1"]);
    refused(&|e| e.accum = 0, &["accum", "at least 1"]);
    refused(
        &|e| e.knobs.every = Some(nitro_run::Cadence::Steps(0)),
        &["checkpointer (every)", "Cadence::Off"],
    );
    refused(
        &|e| e.knobs.keep_last = Some(0),
        &["keep_last", "at least 1"],
    );
    // max_epochs 0 builds (to evaluate or export) but does not train.
    let mut e = tiny(d.path());
    e.epochs = 0;
    let err = Nitro::new(e).unwrap().train().unwrap_err().to_string();
    assert!(
        err.contains("max_epochs") && err.contains("at least one epoch"),
        "{err}"
    );
}

/// Every cadence saves what it says, in the background or inline, and
/// the report counts the time the loop was blocked on it.
#[test]
fn checkpoint_cadences_save_what_they_say() {
    quiet();
    let steps_of = |dir: &std::path::Path| -> Vec<u64> {
        let mut v: Vec<u64> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|f| {
                let n = f.ok()?.file_name().into_string().ok()?;
                n.strip_prefix("ckpt-")?
                    .strip_suffix(".nckpt")?
                    .parse()
                    .ok()
            })
            .collect();
        v.sort();
        v
    };
    use nitro_run::Cadence;
    // 10 updates per epoch, 4 epochs; keep them all.
    for (every, inline, want) in [
        (Cadence::Off, false, vec![]),
        (Cadence::End, false, vec![40]),
        (Cadence::Epochs(1), false, vec![10, 20, 30, 40]),
        (Cadence::Epochs(3), true, vec![30, 40]),
        (Cadence::Steps(15), false, vec![15, 30, 40]),
        (Cadence::Steps(15), true, vec![15, 30, 40]),
    ] {
        let d = tempfile::tempdir().unwrap();
        let mut e = tiny(d.path());
        e.epochs = 4;
        e.knobs.every = Some(every);
        e.knobs.inline_saves = inline;
        e.knobs.keep_last = Some(10);
        let mut n = Nitro::new(e).unwrap();
        let r = n.train().unwrap();
        assert_eq!(steps_of(d.path()), want, "{every:?} inline={inline}");
        assert!(r.checkpoint_time <= r.wall_time);
        if every == Cadence::Off {
            assert!(n.resume().unwrap().is_none());
        } else {
            // The newest resumes at the end.
            let mut again = Nitro::new(tiny(d.path())).unwrap();
            again.resume().unwrap().unwrap();
            assert_eq!(again.step(), 40);
            assert_eq!(bits(&again), bits(&n), "{every:?}");
        }
    }
}

/// A model too large for any machine (a mistyped width) is an error from
/// setup naming the hook, the parameter and the bytes asked for, not an
/// abort of the process.
#[test]
fn a_model_too_large_for_memory_is_a_named_error_not_an_abort() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut e = tiny(d.path());
    e.width = (1usize << 44).into(); // 0.weight f32[4, 2^44]: 281 TB
    let err = Nitro::new(e).err().expect("the allocation is refused");
    let msg = err.to_string();
    for words in [
        "build_model",
        "`0.weight`",
        "f32[4,17592186044416]",
        "281.5 TB",
        "smaller",
    ] {
        assert!(msg.contains(words), "{words:?} missing from: {msg}");
    }
}
