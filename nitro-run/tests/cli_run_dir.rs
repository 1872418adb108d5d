//! The CLI's run directory and exit codes, driven as a user drives them
//! (the `digits_mlp` example binary as a subprocess): 0 only when a command
//! did what was asked, every refusal naming the field, the file or the fix.

#[path = "support/digits_bin.rs"]
mod digits_bin;

use std::path::Path;
use std::process::Command;

use digits_bin::{example, run};
use std::time::{Duration, Instant};

/// Runs `args`, asserting the exit code; returns (stdout, stderr).
fn exits(code: i32, args: &[&str]) -> (String, String) {
    let out = run(args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

fn has_all(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "`{p}` missing from:\n{text}");
    }
}

fn quick<'a>(dir: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    [
        &["--preset", "quick", "--quiet", "--run-dir", dir][..],
        rest,
    ]
    .concat()
}

fn ckpt_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|f| f.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".nckpt"))
        .collect();
    names.sort();
    names
}

#[test]
fn commands_that_need_a_checkpoint_fail_without_one_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("never-trained");
    let m = missing.to_str().unwrap();
    for command in ["eval", "predict", "export", "export-params"] {
        let (stdout, err) = exits(3, &quick(m, &[command]));
        has_all(
            &err,
            &[
                command,
                m,
                "does not exist",
                "train first",
                "train --run-dir",
            ],
        );
        assert!(!stdout.contains("accuracy"), "{stdout}");
    }
    assert!(!missing.exists(), "eval created the run directory");
    // An empty directory, and one whose only checkpoint is damaged.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = empty.to_str().unwrap();
    let (_, err) = exits(3, &quick(e, &["eval"]));
    has_all(
        &err,
        &[e, "holds none, or every one is damaged", "train first"],
    );
    std::fs::write(empty.join("ckpt-000000000008.nckpt"), b"damaged").unwrap();
    let (_, err) = exits(3, &quick(e, &["eval"]));
    has_all(&err, &["ckpt-000000000008.nckpt", "train first"]);
    assert!(!empty.join("model.nexp").exists());
}

#[test]
fn refused_values_name_the_field_the_value_and_the_range() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    for (set, parts) in [
        ("width=0", &["`width`", "0", "1..=65536"][..]),
        ("width=100000000", &["`width`", "100000000", "1..=65536"]),
        ("smoothing=5", &["`smoothing`", "5", "0.0..1.0"]),
        ("n_eval=0", &["`n_eval`", "0", "1.."]),
    ] {
        let (_, err) = exits(2, &quick(d, &["--set", set, "train"]));
        has_all(&err, parts);
    }
    let (_, err) = exits(1, &quick(d, &["--set", "lr=-1", "train"]));
    has_all(&err, &["optimizer (lr)", "-1", "greater than 0"]);
    let (_, err) = exits(1, &quick(d, &["train", "--max-epochs", "0"]));
    has_all(&err, &["max_epochs", "at least one epoch"]);
    assert!(ckpt_files(tmp.path()).is_empty(), "a refused run trained");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let f = file.to_str().unwrap();
    let (_, err) = exits(1, &quick(f, &["eval"]));
    has_all(&err, &[f, "is a file", "name a directory"]);
    assert!(!err.contains("File exists"), "{err}");
}

/// A trained run: a damaged manifest is rebuilt with a warning, stale
/// temporaries go at the next start, `import-params` lands in the
/// checkpoint eval loads, and predict checks a batch in the user's terms.
#[test]
fn a_trained_run_survives_damage_and_takes_imported_params() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    exits(0, &quick(d, &["train"]));
    let manifest = tmp.path().join("nitro-ckpt-store.cbor");
    let bytes = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &bytes[..bytes.len() / 2]).unwrap();
    let stale = tmp.path().join(".ckpt-000000000004.nckpt.tmp-0-1");
    std::fs::write(&stale, b"partial").unwrap();
    let (stdout, err) = exits(0, &quick(d, &["eval"]));
    has_all(&err, &[manifest.to_str().unwrap(), "rebuilt", "step 8"]);
    assert!(!err.contains("Error {"), "a debug dump: {err}");
    assert!(stdout.contains("test accuracy"), "{stdout}");
    assert!(!stale.exists(), "a stale temporary survived the next start");

    // import-params: zeros in, the same zeros out of the newest checkpoint.
    let params = tmp.path().join("p.safetensors");
    exits(
        0,
        &quick(d, &["export-params", "--output", params.to_str().unwrap()]),
    );
    let mut file = nitro_run::safetensors::read(&params).unwrap();
    for a in file.tensors.values_mut() {
        *a = nitro_graph::Array::zeros(a.spec());
    }
    let zeros = tmp.path().join("zeros.safetensors");
    nitro_run::safetensors::write(&zeros, &file.tensors, &Default::default()).unwrap();
    let before = ckpt_files(tmp.path());
    exits(
        0,
        &quick(d, &["import-params", "--input", zeros.to_str().unwrap()]),
    );
    assert_eq!(ckpt_files(tmp.path()), before, "rotation kept the import");
    let back = tmp.path().join("back.safetensors");
    let (_, err) = exits(
        0,
        &quick(d, &["export-params", "--output", back.to_str().unwrap()]),
    );
    assert!(err.contains("(step 8)"), "{err}");
    assert_eq!(
        nitro_run::safetensors::read(&back).unwrap().tensors,
        file.tensors,
        "eval/export load the imported params"
    );

    // predict: a wrong sample shape and a u8 batch, named as given.
    let input = tmp.path().join("batch.safetensors");
    let write = |a: nitro_graph::Array| {
        let tensors = std::collections::BTreeMap::from([("image".to_string(), a)]);
        nitro_run::safetensors::write(&input, &tensors, &Default::default()).unwrap();
    };
    write(nitro_graph::Array::new(&[3, 27, 27], vec![0f32; 3 * 729]).unwrap());
    let i = input.to_str().unwrap();
    let (_, err) = exits(1, &quick(d, &["predict", "--input", i]));
    has_all(&err, &["`image`", "f32[3, 27, 27]", "f32[n, 28, 28]"]);
    assert!(
        !err.contains("compile another program") && !err.contains("b0."),
        "{err}"
    );
    write(nitro_graph::Array::new(&[2, 28, 28], vec![0u8; 2 * 784]).unwrap());
    let (_, err) = exits(1, &quick(d, &["predict", "--input", i]));
    has_all(&err, &["u8[2, 28, 28]", "f32[n, 28, 28]"]);
    assert!(!err.contains("i32"), "{err}");

    // A damaged export says so as an export.
    let model = tmp.path().join("model.nexp");
    exits(
        0,
        &quick(d, &["export", "--output", model.to_str().unwrap()]),
    );
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() - 9]).unwrap();
    let err = nitro_run::Exported::load(&model).err().unwrap().to_string();
    has_all(&err, &["is not a nitro export", "export the model again"]);
    assert!(!err.contains("valid checkpoint"), "{err}");

    let (out, _) = exits(0, &quick(d, &["summary"]));
    has_all(
        &out,
        &["model summary", "total", "kernels per update", "peak"],
    );
    // quick: 784*32 + 32 + 32*10 + 10 parameters.
    assert!(
        out.contains(&(784 * 32 + 32 + 32 * 10 + 10).to_string()),
        "{out}"
    );
}

/// Ctrl-C saves, stops, skips the final evaluation and exits 130.
#[test]
fn ctrl_c_saves_then_exits_130() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let mut child = Command::new(example())
        .args(quick(d, &["train", "--max-epochs", "400"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while ckpt_files(tmp.path()).is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint was written");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    has_all(&stderr, &["interrupted at step", "resume --run-dir"]);
    assert!(!stdout.contains("test accuracy"), "{stdout}");
    let (_, err) = exits(0, &quick(d, &["eval"]));
    assert!(err.contains("loaded"), "{err}");
}
