//! The `tiny_gpt` example end to end through the standard CLI: a short
//! training run beats the corpus's unigram entropy, and `sample` is
//! deterministic in its seed and sweeps the Device field `temperature`
//! with one compile.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The example binary, (re)built first (`cargo test` builds examples
/// without refreshing `target/<profile>/examples`).
fn example() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let me = std::env::current_exe().expect("test exe path");
        let profile_dir = me
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "nitro-run", "--example", "tiny_gpt"]);
        if cfg!(feature = "cuda") {
            build.args(["--features", "cuda"]);
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        assert!(build.status().expect("run cargo build").success());
        profile_dir
            .join("examples")
            .join(format!("tiny_gpt{}", std::env::consts::EXE_SUFFIX))
    })
}

fn run(dir: &Path, args: &[&str]) -> (String, String) {
    let out: Output = Command::new(example())
        .args(args)
        .args(["--preset", "quick", "--quiet", "--run-dir"])
        .arg(dir)
        .output()
        .expect("run tiny_gpt");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "tiny_gpt {args:?}:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

fn number_after(text: &str, marker: &str) -> f64 {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no `{marker}` in:\n{text}"));
    text[at + marker.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.trim_end_matches([',', ';']).parse().ok())
        .unwrap_or_else(|| panic!("no number after `{marker}` in:\n{text}"))
}

/// The text `sample` printed (everything before the cache line).
fn sample_text(stdout: &str) -> &str {
    stdout.split("cache (predict):").next().unwrap_or("")
}

#[test]
fn trains_below_unigram_entropy_and_samples_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, stderr) = run(dir.path(), &["train"]);
    let unigram = number_after(&stderr, "unigram entropy ");
    let bpc = number_after(&stdout, "test bpc: ");
    assert!(
        (4.0..6.6).contains(&unigram),
        "this repository's text: {unigram}"
    );
    assert!(bpc < unigram - 0.5, "test bpc {bpc} vs unigram {unigram}");

    let sample = |args: &[&str]| {
        let mut all = vec!["sample", "--prompt", "fn main", "--steps", "24"];
        all.extend_from_slice(args);
        run(dir.path(), &all).0
    };
    let a = sample(&["--seed", "7"]);
    let b = sample(&["--seed", "7"]);
    let c = sample(&["--seed", "8"]);
    assert_eq!(a, b, "same seed, same text");
    assert_ne!(
        sample_text(&a),
        sample_text(&c),
        "another seed draws other text"
    );
    assert!(sample_text(&a).starts_with("fn main"));
    // The prompt and 24 characters, then the newline the command ends its
    // line with (the sample itself may end in whitespace, so no trim).
    let text = sample_text(&a)
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("the sample ends its line: {a:?}"));
    assert_eq!(text.chars().count(), "fn main".len() + 24, "{text:?}");

    // Three temperatures in one process: one compile, and the colder
    // samples differ from the hotter ones (the value reached the program).
    let sweep = sample(&["--seed", "7", "--sweep", "temperature=0.3,1.0,3.0"]);
    assert_eq!(number_after(&sweep, "compiles ") as u64, 1, "{sweep}");
    assert_eq!(number_after(&sweep, "misses ").round() as u64, 1, "{sweep}");
    let parts: Vec<&str> = sweep.split("--- temperature=").skip(1).collect();
    assert_eq!(parts.len(), 3, "{sweep}");
    assert!(
        parts[1].contains(sample_text(&a).trim_end()),
        "temperature 1 is the default's text"
    );
    assert_ne!(
        parts[0].split_once('\n').unwrap().1,
        parts[2].split_once('\n').unwrap().1
    );
}

#[test]
fn an_experiment_without_a_sampler_refuses_sample_naming_the_hook() {
    let exe = example().with_file_name(format!("digits_mlp{}", std::env::consts::EXE_SUFFIX));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-p", "nitro-run", "--example", "digits_mlp"]);
    if exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .is_some_and(|n| n == "release")
    {
        build.arg("--release");
    }
    assert!(build.status().unwrap().success());
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .args(["--preset", "quick", "--quiet", "--run-dir"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    assert!(run(&["train"]).status.success());
    let out = run(&["sample", "--prompt", "x"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("has no sampler") && stderr.contains("Experiment::sample"),
        "{stderr}"
    );
}
