//! The standard CLI, driven as a user drives it: the `digits_mlp` example
//! binary run as a subprocess (stdout and stderr are pipes, not a
//! terminal). This test binary links no experiment: the exported model is
//! loaded and run here with `Exported` alone.

#[path = "support/digits_bin.rs"]
mod digits_bin;

use digits_bin::run;

use nitro_run::metrics_log::read_rows;
use nitro_run::Exported;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `run`, asserting success; returns (stdout, stderr).
fn ok(args: &[&str]) -> (String, String) {
    let out = run(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// `run`, asserting failure; returns stderr.
fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} should fail");
    text(&out.stderr)
}

#[test]
fn help_lists_every_field_with_category_type_default_and_doc() {
    let (help, _) = ok(&["--help"]);
    for row in [
        [
            "width",
            "GraphConst",
            "usize",
            "default 256",
            "Hidden width",
        ],
        [
            "smoothing",
            "Device",
            "f32",
            "default 0.0",
            "Label smoothing",
        ],
        [
            "n_train",
            "Host",
            "usize",
            "default 20000",
            "Training samples",
        ],
    ] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{} ", row[0])))
            .unwrap_or_else(|| panic!("no line for `{}` in:\n{help}", row[0]));
        for cell in row {
            assert!(line.contains(cell), "`{cell}` missing from `{line}`");
        }
    }
    for command in [
        "train",
        "resume",
        "eval",
        "predict",
        "export",
        "show-config",
        "presets",
        "plot",
    ] {
        assert!(help.contains(command), "command `{command}` not in --help");
    }
    for option in [
        "--preset",
        "--set",
        "--run-dir",
        "--device",
        "--max-epochs",
        "--quiet",
    ] {
        assert!(help.contains(option), "option `{option}` not in --help");
    }
    assert!(help.contains("quick, wide"), "presets not in --help");
}

#[test]
fn a_bad_override_names_the_field_the_value_and_the_type() {
    let err = fails(&["--set", "width=abc", "show-config"]);
    for part in ["width", "abc", "usize"] {
        assert!(err.contains(part), "`{part}` missing from: {err}");
    }
    let err = fails(&["--set", "widht=3", "show-config"]);
    assert!(err.contains("widht") && err.contains("n_train"), "{err}");
}

#[test]
fn an_unknown_preset_lists_the_valid_ones() {
    let err = fails(&["--preset", "nope", "show-config"]);
    for part in ["nope", "quick", "wide"] {
        assert!(err.contains(part), "`{part}` missing from: {err}");
    }
}

#[test]
fn show_config_prints_the_marker_table_with_preset_and_overrides() {
    let (out, _) = ok(&["--preset", "quick", "--set", "lr=0.01", "show-config"]);
    assert!(out.contains("preset: quick"), "{out}");
    let header = out
        .lines()
        .find(|l| l.starts_with("field"))
        .expect("a header row");
    for column in ["category", "type", "value", "doc"] {
        assert!(header.contains(column), "{header}");
    }
    let row = |field: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{field} ")))
            .unwrap_or_else(|| panic!("no row for {field}:\n{out}"))
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("width"), ["width", "GraphConst", "usize", "32"]);
    assert_eq!(row("smoothing"), ["smoothing", "Device", "f32", "0.0"]);
    assert_eq!(row("lr"), ["lr", "Host", "f64", "0.01"]);
}

/// Train one epoch with progress lines on (stderr is a pipe), then resume
/// for a second: the log is continuous, the progress lines are plain, the
/// PNGs decode, and the last stdout line is the headline metric.
#[test]
fn train_then_resume_logs_plots_and_continues_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_str().unwrap();
    let common = ["--preset", "quick", "--run-dir", run_dir];
    let (stdout, stderr) = ok(&[&common[..], &["train", "--max-epochs", "1"]].concat());
    // 1024 samples / 128 = 8 updates per epoch.
    let progress: Vec<&str> = stderr.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(progress.len(), 1, "{stderr}");
    let line = progress[0];
    assert!(line.starts_with("step 8/8  epoch 1  loss "), "{line}");
    for part in ["lr ", "samples/s", "eta "] {
        assert!(line.contains(part), "`{part}` missing from `{line}`");
    }
    assert!(!stderr.contains('\r'), "a bar was drawn to a pipe");
    assert!(stderr.contains("epoch 1/1"), "{stderr}");
    // --run-dir and --max-epochs are run values resolved before the handle
    // exists: reported as set by the driver, never as redefined accessors,
    // and recorded as the run used them.
    assert!(!stderr.contains("was redefined"), "{stderr}");
    assert!(
        stderr.contains("set by the driver: max_epochs, run_dir"),
        "{stderr}"
    );
    let config = std::fs::read_to_string(dir.path().join("config.txt")).unwrap();
    assert!(config.contains("max_epochs 1 "), "{config}");
    assert!(
        stdout
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("test accuracy: "),
        "{stdout}"
    );

    // CSV: a header, one row per step and one per validation.
    let csv = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "kind,step,epoch,loss,lr,val_loss,val_accuracy");
    assert_eq!(lines.len(), 1 + 8 + 1, "{csv}");
    for (i, l) in lines[1..9].iter().enumerate() {
        let cells: Vec<&str> = l.split(',').collect();
        assert_eq!(cells[..3], ["step", &(i + 1).to_string(), "1"], "{l}");
        assert!(cells[3].parse::<f64>().unwrap().is_finite());
        assert!(cells[4].parse::<f64>().unwrap() > 0.0);
    }
    let epoch: Vec<&str> = lines[9].split(',').collect();
    assert_eq!(epoch[..3], ["epoch", "8", "1"]);
    let acc: f64 = epoch[6].parse().unwrap();
    assert!((0.0..=1.0).contains(&acc));

    // JSONL: the same rows, every line an object.
    let jsonl = std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap();
    for l in jsonl.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["step"].is_u64() && v["loss"].is_f64(), "{l}");
    }
    assert_eq!(jsonl.lines().count(), 9);

    // The config table, written once per run.
    let config = std::fs::read_to_string(dir.path().join("config.txt")).unwrap();
    assert!(
        config.contains("width") && config.contains("GraphConst"),
        "{config}"
    );

    // Plots: paths printed, files decode as PNG.
    for name in ["loss.png", "metrics.png", "lr.png"] {
        let path = dir.path().join(name);
        assert!(
            stderr.contains(&path.display().to_string()),
            "{name} not printed"
        );
        let decoder = png::Decoder::new(std::fs::File::open(&path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (900, 540));
        // Not a blank canvas: the lines are drawn.
        assert!(buf.iter().any(|&b| b < 200), "{name} is blank");
    }

    // Resume: continues from step 8 to 16; no step logged twice.
    let (stdout, stderr) = ok(&[&common[..], &["resume", "--max-epochs", "2", "--quiet"]].concat());
    assert!(
        stderr.contains("resumed from") && stderr.contains("at step 8"),
        "{stderr}"
    );
    assert!(
        !stderr.lines().any(|l| l.starts_with("step ")),
        "--quiet still printed progress"
    );
    assert!(stdout
        .trim_end()
        .lines()
        .last()
        .unwrap()
        .starts_with("test accuracy: "));
    let rows = read_rows(dir.path()).unwrap();
    let steps: Vec<u64> = rows
        .iter()
        .filter(|r| r.kind == "step")
        .map(|r| r.step)
        .collect();
    assert_eq!(steps, (1..=16).collect::<Vec<_>>());
    let epochs: Vec<(u64, u64)> = rows
        .iter()
        .filter(|r| r.kind == "epoch")
        .map(|r| (r.epoch, r.step))
        .collect();
    assert_eq!(epochs, [(1, 8), (2, 16)]);

    // `plot` on the run directory redraws them.
    let (out, _) = ok(&["plot", run_dir]);
    assert_eq!(out.lines().count(), 3, "{out}");
}

/// `predict` in one process, `export` in another, and the exported file
/// run here, with no experiment code: the same outputs, bit for bit,
/// including a short final batch that is padded and sliced back.
#[test]
fn an_exported_model_predicts_exactly_what_predict_returned() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run_dir = d.to_str().unwrap();
    let common = ["--preset", "quick", "--run-dir", run_dir, "--quiet"];
    ok(&[&common[..], &["train", "--max-epochs", "1"]].concat());

    // 300 rows: two full batches of 128 and a short one of 44.
    let n = 300;
    let images: Vec<f32> = (0..n * 28 * 28)
        .map(|i| ((i * 7919) % 255) as f32 / 255.0)
        .collect();
    let batch = nitro_data::Batch::new()
        .with(
            "image",
            nitro_data::HostArray::from_vec(&[n, 28, 28], images.clone()).unwrap(),
        )
        .unwrap();
    let input = d.join("batch.safetensors");
    let tensors = std::collections::BTreeMap::from([(
        "image".to_string(),
        nitro_graph::Array::new(&[n, 28, 28], images).unwrap(),
    )]);
    nitro_run::safetensors::write(&input, &tensors, &Default::default()).unwrap();
    let preds = d.join("preds.safetensors");
    let (out, _) = ok(&[
        &common[..],
        &[
            "predict",
            "--input",
            input.to_str().unwrap(),
            "--output",
            preds.to_str().unwrap(),
        ],
    ]
    .concat());
    assert!(out.contains("wrote 300 rows of output"), "{out}");
    let model = d.join("model.nexp");
    ok(&[
        &common[..],
        &["export", "--output", model.to_str().unwrap()],
    ]
    .concat());

    let expected = nitro_run::safetensors::read(&preds).unwrap().tensors;
    let exported = Exported::load(&model).unwrap();
    assert_eq!(exported.experiment(), "DigitsMlp");
    assert_eq!(exported.width(), 128);
    assert_eq!(exported.outputs(), ["output"]);
    let got = exported.predict(&batch).unwrap();
    assert_eq!(got["output"].shape(), [300, 10]);
    assert_eq!(got, expected);

    // A batch without the input field says what the model takes.
    let wrong = nitro_data::Batch::new()
        .with(
            "pixels",
            nitro_data::HostArray::from_vec(&[1, 4], vec![0f32; 4]).unwrap(),
        )
        .unwrap();
    let err = exported.predict(&wrong).unwrap_err().to_string();
    assert!(err.contains("image") && err.contains("pixels"), "{err}");
}

#[test]
fn device_cuda_runs_on_a_gpu_or_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_str().unwrap();
    let args = ["--device", "cuda", "--quiet", "eval", "--run-dir", run_dir];
    if nitro_graph::Device::Cuda(0).check().is_ok() {
        // A GPU: a quick run trains and evaluates there (eval alone would
        // refuse the empty run directory: train first).
        let train = [
            "--device",
            "cuda",
            "--quiet",
            "--preset",
            "quick",
            "train",
            "--run-dir",
            run_dir,
        ];
        let (out, _) = ok(&train);
        assert!(out.contains("test loss"), "{out}");
        return;
    }
    let err = fails(&args);
    assert!(err.contains("cannot run on cuda:0"), "{err}");
    assert!(err.contains("--device cpu"), "{err}");
    if cfg!(feature = "cuda") {
        assert!(err.contains("no CUDA driver found"), "{err}");
    } else {
        assert!(
            err.contains("nitro was built without CUDA; rebuild with `--features cuda`"),
            "{err}"
        );
    }
    // Commands that run no program do not need the device.
    ok(&["--device", "cuda", "show-config"]);
}
