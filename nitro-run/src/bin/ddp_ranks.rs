//! The program nitro-run's data-parallel tests launch (`tests/ddp.rs`),
//! under `mpirun -n N` or alone (feature `mpi`).
//!
//! ```text
//! ddp_ranks steps OUT f32|f64 BATCH STEPS
//! ```
//!
//! trains a small MLP on the digits data with accumulation (2), clipping
//! and a padded short final batch (AdamW in f64, momentum SGD in f32), one
//! update at a time, and writes
//! `OUT/rank{r}.txt`: one line per update with the bits of every
//! parameter, then the validation metrics (bits). Run as N ranks with
//! micro-batch b, it must match one process with micro-batch N·b.

use std::fmt::Write as _;
use std::path::PathBuf;

use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::{ShortBatch, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::{DType, HostBuffer, Tensor};
use nitro_markers::{Experiment, ExperimentFields, Fields};
use nitro_run::{
    Cadence, Checkpointer, Distributed, HookError, Logger, Metric, ModelParts, Nitro, Optimizer,
};

/// A small classifier whose params are f32 or f64.
#[derive(Experiment, Debug)]
struct DdpMlp {
    /// Micro-batch width (per rank).
    #[experiment(default = 16)]
    batch: usize,
    /// f64 params (and inputs) instead of f32.
    #[experiment(default = false)]
    f64_params: bool,
}

#[derive(Fields)]
struct Images<T> {
    image: T,
}

#[derive(Fields)]
struct Labels<T> {
    label: T,
}

impl nitro_run::Experiment for DdpMlp {
    type Model = Chain;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new()
            .push(Dense::new(784, 24).with(Activation::Relu))
            .push(Dense::new(24, 10));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        if self.f64_params {
            params = params
                .into_iter()
                .map(|(k, a)| (k, a.cast(DType::F64)))
                .collect();
        }
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        // 500 samples: with a global batch of 32 and accum 2 the last
        // window is partial and its last global batch short (20 rows:
        // rank 1 of 2 then holds 4 real rows).
        Ok(generate(&DigitsConfig {
            train: 500,
            val: 150,
            test: 10,
            seed: 3,
        })?)
    }

    fn forward(
        _: &DdpMlpView<Tensor>,
        model: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        let dtype = ps["0.weight"].dtype();
        let image = x.image.reshape(&[n, 784]).cast(dtype);
        (model.apply(ps, "", &image), st.clone())
    }

    fn loss(_: &DdpMlpView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.label, 0.0)
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![Metric::accuracy("output", "label")]
    }

    fn train_metrics(&self) -> Vec<Metric> {
        vec![Metric::accuracy("output", "label")]
    }

    fn batch_size(&self) -> usize {
        self.batch
    }
    fn accum(&self) -> usize {
        2
    }
    fn short_batch(&self) -> ShortBatch {
        ShortBatch::PadWithMask
    }
    fn clip(&self) -> Option<f64> {
        Some(0.5)
    }
    fn max_epochs(&self) -> u64 {
        2
    }
    fn optimizer(&self) -> Optimizer {
        // f64 runs AdamW. f32 runs Nesterov momentum: Adam's first updates
        // are g/(|g|+eps), which turns the last-bit differences of a
        // near-zero f32 gradient (a pixel no digit lights) into visible
        // ones; an update linear in the gradient keeps a reduction-order
        // difference at f32 rounding, which is what the test measures.
        if self.f64_params {
            Optimizer::adamw(3e-3, 1e-4)
        } else {
            Optimizer::momentum(0.05, 0.9, true)
        }
    }
    fn checkpointer(&self) -> Checkpointer {
        Checkpointer {
            every: Cadence::Off,
            ..Checkpointer::default()
        }
    }
    fn run_dir(&self) -> PathBuf {
        std::env::temp_dir().join("nitro-ddp-ranks-unused")
    }
    fn logger(&self) -> Logger {
        Logger::quiet()
    }
}

fn bits(buf: &HostBuffer) -> String {
    let mut s = String::new();
    match buf {
        HostBuffer::F32(v) => v
            .iter()
            .for_each(|x| write!(s, "{:x},", x.to_bits()).unwrap()),
        HostBuffer::F64(v) => v
            .iter()
            .for_each(|x| write!(s, "{:x},", x.to_bits()).unwrap()),
        other => panic!("unexpected param dtype {:?}", other.dtype()),
    }
    s
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [mode, out, dtype, batch, steps] = args else {
        return Err("usage: ddp_ranks steps OUT f32|f64 BATCH STEPS".into());
    };
    if mode != "steps" {
        return Err(format!("unknown mode `{mode}`").into());
    }
    nitro_run::set_config_report(false);
    let mut e = DdpMlp::defaults();
    e.batch = batch.parse()?;
    e.f64_params = dtype == "f64";
    let mut n = Nitro::new(e)?;
    let rank = n.distributed().rank();
    let mut text = format!("{}\n", n.distributed());
    let steps: u64 = steps.parse()?;
    for s in 1..=steps {
        n.stop_after(s);
        n.train()?;
        let line: Vec<String> = n
            .params()
            .iter()
            .map(|(k, a)| format!("{k}={}", bits(a.data())))
            .collect();
        writeln!(text, "step {s} {}", line.join(" "))?;
    }
    for (k, v) in n.evaluate("val")? {
        writeln!(text, "val {k} {v:e} {:x}", v.to_bits())?;
    }
    std::fs::write(PathBuf::from(out).join(format!("rank{rank}.txt")), text)?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        // One write for the whole line: `eprintln!` writes its pieces
        // separately, and mpirun interleaves ranks' pieces.
        let line = format!("error: {e}\n");
        eprint!("{line}");
        std::process::exit(1);
    }
}
