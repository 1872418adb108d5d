//! The standard command line of any experiment:
//! `fn main() { nitro_run::cli::main::<MyExp>() }`.
//!
//! ```text
//! my_exp [COMMAND] [--preset NAME] [--set field=value]... [--run-dir DIR]
//!        [--device cpu|cuda[:N]] [--max-epochs N] [--quiet]
//!
//! train          train from scratch (the default command)
//! resume         continue from the newest checkpoint in the run directory
//! eval           evaluate the newest checkpoint on a split
//! predict        forward outputs for a split or a safetensors batch
//! export         write the predict program for serving (`Exported::load`)
//! export-params  write the params as safetensors
//! import-params  load params from safetensors and save them as a checkpoint
//! show-config    print the marker table with the values this run would use
//! summary        parameters per layer and in total, bytes, the train step's
//!                kernel count and peak memory
//! presets        list the named configurations
//! plot           write PNG plots of a run directory's metrics
//! sample         generate from the newest checkpoint (`--prompt`, `--steps`,
//!                `--seed`, `--sweep FIELD=V1,V2,..` over a Device field:
//!                one compile for the whole sweep); experiments that
//!                implement `Experiment::sample` only
//! ```
//!
//! Exit status (see also the README):
//!
//! ```text
//! 0    the command did what was asked (an early stop is a finished run)
//! 1    it failed (the message names the file, field or step, and the fix)
//! 2    the command line is wrong: an unknown option or command, a `--set`
//!      or `--preset` value refused (unknown field, wrong type, out of range)
//! 3    eval / predict / export / export-params found no usable checkpoint
//!      in the run directory: train first
//! 130  interrupted (Ctrl-C): training stopped after saving a checkpoint;
//!      `resume` continues from it
//! ```
//!
//! `--help` lists every field of the experiment with its category, type,
//! default and doc line. `--set` values are parsed by the field's type
//! (the markers' override parser), so `--set width=abc` fails naming the
//! field, the value and the type expected. Set `RUST_LOG=nitro=info` for
//! the tracing events (setup, compiles with their reason, checkpoints,
//! early stops).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, ArgMatches, Command};
use nitro_graph::Device;
use nitro_markers::Recipe;

use crate::experiment::Experiment;
use crate::handle::Nitro;
use crate::report::{config_table, set_config_report};

type Error = Box<dyn std::error::Error>;

mod batch;
mod error;
mod sample;
pub use batch::read_batch;
use batch::split_batch;
pub use error::{exit_code, CliError};
use sample::{parse_sweep, sample_once};

/// `eprintln!` on rank 0 only: every rank of a data-parallel job runs the
/// command, and the job's output is one copy of its lines (errors are
/// printed by every rank: each names what it saw).
macro_rules! note {
    ($root:expr, $($arg:tt)*) => {
        if $root {
            eprintln!($($arg)*);
        }
    };
}

/// `println!` on rank 0 only (see `note!`).
macro_rules! say {
    ($root:expr, $($arg:tt)*) => {
        if $root {
            println!($($arg)*);
        }
    };
}

/// Runs the command line of experiment `E` from the process arguments and
/// exits with the status [`exit_code`] gives (0 on success; see the module
/// doc), the error printed to stderr.
pub fn main<E: Experiment>() {
    match run::<E, _, _>(std::env::args_os()) {
        Ok(()) => std::process::exit(0),
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(clap_error) => clap_error.exit(),
            Err(e) => {
                // One write for the whole line: `eprintln!` writes its pieces
                // separately, and mpirun interleaves ranks' pieces.
                let line = format!("error: {e}\n");
                eprint!("{line}");
                std::process::exit(exit_code(&*e));
            }
        },
    }
}

/// This program's name, for advice in messages.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "<program>".into())
}

/// The field table `--help` ends with: name, category, type, default, doc.
fn fields_help<E: Experiment>() -> String {
    let meta = E::defaults().config_metadata();
    let width =
        |f: &dyn Fn(&nitro_markers::FieldMeta) -> usize| meta.iter().map(f).max().unwrap_or(0);
    let (wn, wc, wt, wv) = (
        width(&|m| m.name.len()),
        width(&|m| format!("{:?}", m.category).len()),
        width(&|m| m.type_name.len()),
        width(&|m| m.value.to_string().len()),
    );
    let mut out = format!(
        "Fields of {} (set with --set field=value; GraphConst recompiles, Device is a traced input, Host is driver-only):\n",
        E::experiment_name()
    );
    for m in &meta {
        out += &format!(
            "  {:<wn$}  {:<wc$}  {:<wt$}  default {:<wv$}  {}\n",
            m.name,
            format!("{:?}", m.category),
            m.type_name,
            m.value.to_string(),
            m.doc.lines().next().unwrap_or("").trim()
        );
    }
    let presets = E::presets();
    if !presets.is_empty() {
        let names: Vec<&str> = presets.iter().map(|p| p.name.as_str()).collect();
        out += &format!("\nPresets (--preset NAME): {}\n", names.join(", "));
    }
    out
}

fn command<E: Experiment>() -> Command {
    let path_arg = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help(help)
    };
    Command::new(E::experiment_name())
        .about(format!(
            "Train, evaluate, export and inspect the {} experiment (nitro). With no command: train.",
            E::experiment_name()
        ))
        .after_help(fields_help::<E>())
        .arg(Arg::new("preset").long("preset").value_name("NAME").global(true).help("Start from a named configuration (see `presets`)"))
        .arg(
            Arg::new("set")
                .long("set")
                .value_name("FIELD=VALUE")
                .action(ArgAction::Append)
                .global(true)
                .help("Override a field, parsed by its type (repeatable; wins over the preset)"),
        )
        .arg(Arg::new("run-dir").long("run-dir").value_name("DIR").value_parser(clap::value_parser!(PathBuf)).global(true).help("Checkpoints, metrics and plots go here (default: the experiment's run_dir)"))
        .arg(Arg::new("device").long("device").value_name("cpu|cuda[:N]").default_value("cpu").global(true).help("Where programs run"))
        .arg(Arg::new("max-epochs").long("max-epochs").value_name("N").value_parser(clap::value_parser!(u64)).global(true).help("Epochs to train (overrides the experiment's max_epochs())"))
        .arg(Arg::new("quiet").long("quiet").short('q').action(ArgAction::SetTrue).global(true).help("No progress and no config report"))
        .subcommand(Command::new("train").about("Train from scratch (clears the run directory's checkpoints and logs)"))
        .subcommand(Command::new("resume").about("Continue training from the newest checkpoint in the run directory"))
        .subcommand(
            Command::new("eval")
                .about("Evaluate the newest checkpoint on a split")
                .arg(Arg::new("split").long("split").default_value("test").help("train, val or test")),
        )
        .subcommand(
            Command::new("predict")
                .about("Forward outputs of the newest checkpoint, written as safetensors")
                .arg(Arg::new("split").long("split").default_value("test").help("The split to predict (when no --input)"))
                .arg(path_arg("input", "A safetensors file of batch fields to predict instead of a split"))
                .arg(path_arg("output", "Where the outputs go (default: <run-dir>/predictions.safetensors)")),
        )
        .subcommand(
            Command::new("export")
                .about("Write the predict program, params and signature to one file for serving")
                .arg(path_arg("output", "The file (default: <run-dir>/model.nexp)")),
        )
        .subcommand(
            Command::new("export-params")
                .about("Write the newest checkpoint's params as safetensors")
                .arg(path_arg("output", "The file (default: <run-dir>/params.safetensors)")),
        )
        .subcommand(
            Command::new("import-params")
                .about("Load params from safetensors (every name, dtype and shape checked) and save them as a checkpoint")
                .arg(path_arg("input", "The safetensors file").required(true)),
        )
        .subcommand(Command::new("show-config").about("Print the marker table with this run's values"))
        .subcommand(Command::new("summary").about("Parameters per layer and in total, bytes, and the train step's kernel count and peak memory"))
        .subcommand(Command::new("presets").about("List the named configurations"))
        .subcommand(
            Command::new("sample")
                .about("Generate from the newest checkpoint (Experiment::sample), then print the predict program's cache counters")
                .arg(Arg::new("prompt").long("prompt").default_value("").help("What the generation continues"))
                .arg(Arg::new("steps").long("steps").value_name("N").default_value("200").value_parser(clap::value_parser!(usize)).help("Tokens to generate"))
                .arg(Arg::new("seed").long("seed").value_name("N").default_value("0").value_parser(clap::value_parser!(u64)).help("Seed of the draws: the same seed gives the same output"))
                .arg(Arg::new("sweep").long("sweep").value_name("FIELD=V1,V2,..").help("Sample once per value of a scalar f32 Device field (e.g. temperature=0.5,1.0): no recompile")),
        )
        .subcommand(
            Command::new("plot")
                .about("Write PNG plots (loss, validation metrics, learning rate) of a run directory")
                .arg(Arg::new("dir").value_name("RUN_DIR").value_parser(clap::value_parser!(PathBuf)).help("Default: --run-dir or the experiment's run_dir")),
        )
}

/// The experiment as configured by `--preset` and `--set`.
fn recipe<E: Experiment>(m: &ArgMatches) -> Result<Recipe<E>, Error> {
    let mut recipe = match m.get_one::<String>("preset") {
        Some(name) => E::from_preset(name, &[])?,
        None => E::from_overrides(&[])?,
    };
    let sets: Vec<&str> = m
        .get_many::<String>("set")
        .map(|v| v.map(String::as_str).collect())
        .unwrap_or_default();
    recipe.overrides = recipe.experiment.apply_text_overrides(&sets)?;
    Ok(recipe)
}

/// Removes what a previous run left in `dir` (checkpoints, their manifest,
/// logs, plots), and nothing else.
fn clear_run_files(dir: &Path) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = (name.starts_with("ckpt-") && name.ends_with(".nckpt"))
            || name == "nitro-ckpt-store.cbor"
            || [
                crate::metrics_log::METRICS_CSV,
                crate::metrics_log::METRICS_JSONL,
                crate::metrics_log::CONFIG_JSON,
                crate::metrics_log::CONFIG_TXT,
                "loss.png",
                "metrics.png",
                "lr.png",
            ]
            .contains(&name.as_str());
        if ours && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs the command line of experiment `E` on `args` (the first is the
/// program name). Usage errors come back as a `clap::Error`.
pub fn run<E, I, T>(args: I) -> Result<(), Error>
where
    E: Experiment,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let m = command::<E>().try_get_matches_from(args)?;
    let (name, sub) = match m.subcommand() {
        Some((name, sub)) => (name, sub),
        None => ("train", &m),
    };
    let recipe = recipe::<E>(&m)?;
    let quiet = m.get_flag("quiet");
    let run_dir = m.get_one::<PathBuf>("run-dir");
    match name {
        "show-config" => {
            if let Some(p) = &recipe.preset {
                println!("preset: {p}");
            }
            print!(
                "{}",
                config_table(E::experiment_name(), &recipe.experiment.config_metadata())
            );
            println!("{}", crate::Distributed::describe_env());
            return Ok(());
        }
        "presets" => {
            let presets = E::presets();
            if presets.is_empty() {
                println!("{} has no presets", E::experiment_name());
            }
            for p in presets {
                let values: Vec<String> =
                    p.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("{}  {}", p.name, values.join(" "));
            }
            return Ok(());
        }
        "plot" => {
            let dir = sub
                .get_one::<PathBuf>("dir")
                .or(run_dir)
                .cloned()
                .unwrap_or_else(|| recipe.experiment.run_dir());
            for path in crate::plot::plot_run(&dir)? {
                println!("{}", path.display());
            }
            return Ok(());
        }
        _ => {}
    }
    let device_text = m.get_one::<String>("device").map_or("cpu", String::as_str);
    let device = Device::parse(device_text)
        .ok_or_else(|| format!("--device `{device_text}`: expected cpu, cuda or cuda:N"))?;
    init_tracing();
    set_config_report(!quiet);
    // Run values from the command line are resolved before construction:
    // the handle, its report and config.txt see them from the start.
    let overrides = crate::RunOverrides {
        run_dir: run_dir.cloned(),
        max_epochs: m.get_one::<u64>("max-epochs").copied(),
        quiet,
    };
    let mut n = Nitro::from_recipe_with(recipe, overrides)?;
    // Commands that run programs run them on --device; the others (export,
    // export-params, import-params) only move host values.
    let world = n.distributed().world_size();
    if world > 1 && !matches!(name, "train" | "resume" | "eval" | "summary") {
        return Err(Box::new(CliError::OneProcess {
            command: name.to_string(),
            world,
        }));
    }
    if matches!(name, "train" | "resume" | "eval" | "predict" | "sample") {
        // A bare `cuda` under mpirun is the GPU of this rank's local rank
        // (one process per GPU); `cuda:N` is taken as written.
        let device = match (device_text, device) {
            ("cuda" | "gpu", Device::Cuda(_)) => Device::Cuda(n.distributed().local_rank()),
            _ => device,
        };
        n.use_device(device)?;
    }
    let dir = n.frozen.run.run_dir.clone();
    let root = n.dist.is_root();
    // Commands that need trained params fail without them: evaluating or
    // shipping the initial params would look like success.
    let restore = |n: &mut Nitro<E>| -> Result<(), Error> {
        match n.resume()? {
            Some(path) => {
                note!(root, "loaded {} (step {})", path.display(), n.step());
                Ok(())
            }
            None => Err(Box::new(CliError::NoCheckpoint {
                command: name.to_string(),
                why: if dir.is_dir() {
                    "it holds none, or every one is damaged: see the warnings above"
                } else {
                    "the directory does not exist"
                },
                dir: dir.clone(),
                program: program_name(),
            })),
        }
    };
    match name {
        "train" | "resume" => {
            if name == "train" {
                if n.dist.is_root() {
                    clear_run_files(&n.frozen.run.run_dir)?;
                }
                // No rank starts (and rank 0 writes nothing) before it is clear.
                n.dist.barrier("train (start)")?;
            } else {
                match n.resume()? {
                    Some(path) => {
                        note!(root, "resumed from {} at step {}", path.display(), n.step())
                    }
                    None => note!(
                        root,
                        "no checkpoint in {}; training from the start",
                        dir.display()
                    ),
                }
            }
            let report = n.train()?;
            let wall = report.wall_time.as_secs_f64().max(1e-9);
            note!(root,
                "trained to step {} in {:.1}s ({:.0}% inside the compiled step, {:.1}% blocked on checkpoints){}",
                report.steps,
                report.wall_time.as_secs_f64(),
                100.0 * report.program_time.as_secs_f64() / wall,
                100.0 * report.checkpoint_time.as_secs_f64() / wall,
                if report.early_stopped {
                    "; stopped early"
                } else {
                    ""
                }
            );
            if n.dist.is_root() {
                for path in crate::plot::plot_run(&dir)? {
                    note!(root, "plot: {}", path.display());
                }
            }
            if report.interrupted {
                let saved = if n.frozen.run.checkpointer.every == crate::Cadence::Off {
                    "checkpoints are off, so nothing was saved".to_string()
                } else {
                    format!(
                        "saved to `{}`: continue with `{} resume --run-dir {}`",
                        dir.display(),
                        program_name(),
                        dir.display()
                    )
                };
                return Err(Box::new(CliError::Interrupted {
                    step: report.steps,
                    saved,
                }));
            }
            if n.data.test.is_some() {
                let metrics = n.evaluate("test")?;
                if root {
                    print_metrics("test", &metrics);
                }
            }
        }
        "eval" => {
            restore(&mut n)?;
            let split = sub
                .get_one::<String>("split")
                .map_or("test", String::as_str);
            let metrics = n.evaluate(split)?;
            if root {
                print_metrics(split, &metrics);
            }
        }
        "predict" => {
            restore(&mut n)?;
            let batch = match sub.get_one::<PathBuf>("input") {
                Some(path) => read_batch(path)?,
                None => split_batch(
                    &n,
                    sub.get_one::<String>("split")
                        .map_or("test", String::as_str),
                )?,
            };
            let outputs = n.predict(&batch)?;
            let path = sub
                .get_one::<PathBuf>("output")
                .cloned()
                .unwrap_or_else(|| dir.join("predictions.safetensors"));
            crate::safetensors::write(&path, &outputs, &BTreeMap::new())?;
            let names: Vec<&str> = outputs.keys().map(String::as_str).collect();
            say!(
                root,
                "wrote {} rows of {} to {}",
                batch.rows(),
                names.join(", "),
                path.display()
            );
        }
        "export" => {
            restore(&mut n)?;
            let path = sub
                .get_one::<PathBuf>("output")
                .cloned()
                .unwrap_or_else(|| dir.join("model.nexp"));
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            n.export(&path)?;
            say!(root, "{}", path.display());
        }
        "export-params" => {
            restore(&mut n)?;
            let path = sub
                .get_one::<PathBuf>("output")
                .cloned()
                .unwrap_or_else(|| dir.join("params.safetensors"));
            n.save_safetensors(&path)?;
            say!(root, "{}", path.display());
        }
        "summary" => say!(root, "{}", n.summary()?),
        "sample" => {
            restore(&mut n)?;
            let request = crate::experiment::SampleRequest {
                prompt: sub.get_one::<String>("prompt").cloned().unwrap_or_default(),
                steps: sub.get_one::<usize>("steps").copied().unwrap_or(200),
                seed: sub.get_one::<u64>("seed").copied().unwrap_or(0),
            };
            let sweep = match sub.get_one::<String>("sweep") {
                Some(text) => Some(parse_sweep(text)?),
                None => None,
            };
            match sweep {
                None => say!(root, "{}", sample_once(&mut n, &request)?),
                Some((field, values)) => {
                    for v in values {
                        n.set_device(&field, v)?;
                        say!(root, "--- {field}={v}");
                        say!(root, "{}", sample_once(&mut n, &request)?);
                    }
                }
            }
            let s = crate::programs::cache_stats("predict");
            say!(
                root,
                "cache (predict): hits {}, misses {}, compiles {}",
                s.hits,
                s.misses,
                s.compiles
            );
        }
        "import-params" => {
            // Into the run's newest position (its step, optimizer state and
            // history), replacing that step's checkpoint: the import is the
            // newest checkpoint, so rotation keeps it and eval loads it.
            let input = sub.get_one::<PathBuf>("input").expect("required");
            let replaced = n.resume()?;
            n.load_safetensors(input)?;
            let mut store = n.open_store()?;
            let path = n.save_checkpoint(&mut store, &BTreeMap::new())?;
            note!(
                root,
                "imported {} as the checkpoint of step {}{}",
                input.display(),
                n.step(),
                if replaced.is_some() {
                    " (replacing that step's params; eval, predict and export load it)"
                } else {
                    ""
                }
            );
            say!(root, "{}", path.display());
        }
        other => unreachable!("clap knows no subcommand `{other}`"),
    }
    Ok(())
}

fn print_metrics(split: &str, metrics: &BTreeMap<String, f64>) {
    // The loss first, then the experiment's metrics: the last line is the
    // headline metric when there is one.
    if let Some(loss) = metrics.get("loss") {
        println!("{split} loss: {loss:.4}");
    }
    for (k, v) in metrics.iter().filter(|(k, _)| *k != "loss") {
        println!("{split} {k}: {v:.4}");
    }
}
