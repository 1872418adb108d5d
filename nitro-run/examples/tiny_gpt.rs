//! A character-level GPT on real text, through the Experiment API and the
//! standard CLI: by default this repository's own `*.rs` and `*.md` files
//! (about 1.8 M characters, in path order; `target/`, `runs/` and hidden
//! folders skipped), or any UTF-8 file or folder with `--set corpus=PATH`.
//!
//! ```text
//! cargo run --release -p nitro-run --example tiny_gpt                     # train (a few minutes)
//! cargo run --release -p nitro-run --example tiny_gpt -- sample --prompt "fn main" --steps 300
//! cargo run --release -p nitro-run --example tiny_gpt -- sample --prompt "fn " --sweep temperature=0.5,0.8,1.2
//! ```
//!
//! Characters map to the 96 symbols of `nitro_data::text::CharVocab`
//! (newline, printable ASCII, one unknown). The split is by 4096-character
//! blocks (1 in 20 validates, 1 in 20 tests); training windows start at
//! seeded random offsets. Setup prints the corpus's unigram entropy in bits
//! per character, the figure a model without context cannot beat; the run
//! reports `val_bpc` per epoch and ends with `test bpc: X`.
//!
//! The model is `nitro_graph::nn::zoo::gpt`: pre-LN causal blocks, exact
//! GELU MLP, learned positions, untied output; by default d 128, 4 heads,
//! 2 layers, context 64 (the benchmark model of `peers/gpt_step.py` is
//! `--set dim=256 --set layers=4 --set context=128`). `temperature` is a
//! Device field: forward also returns `probs = softmax(logits /
//! temperature)`, which `sample` draws from, so a sweep compiles nothing
//! (`sample` prints the cache counters). Sampling is deterministic in
//! `--seed`. `peers/tiny_gpt_twin.py` is the same recipe in PyTorch.

use std::path::PathBuf;

use nitro_data::text::{
    char_lm_splits, read_corpus, unigram_entropy_bits, CharLmConfig, CharVocab,
};
use nitro_data::{Batch, HostArray, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::ops::softmax;
use nitro_graph::nn::zoo::{gpt, GptConfig};
use nitro_graph::nn::{Chain, Ctx};
use nitro_graph::Tensor;
use nitro_markers::{Device, Experiment, Fields, GraphConst, Preset, Tree};
use nitro_run::{Distributed, HookError, Metric, ModelParts, Optimizer, Predictor, SampleRequest};

/// A small character-level GPT.
#[derive(Experiment, Debug)]
#[experiment(presets = presets)]
struct TinyGpt {
    /// Characters of context (positional table rows).
    #[experiment(default = 64, range = 2..=4096)]
    context: GraphConst<usize>,
    /// Model width.
    #[experiment(default = 128, range = 1..=8192)]
    dim: GraphConst<usize>,
    /// Attention heads (dividing dim).
    #[experiment(default = 4, range = 1..=256)]
    heads: GraphConst<usize>,
    /// Transformer blocks.
    #[experiment(default = 2, range = 1..=64)]
    layers: GraphConst<usize>,
    /// Sampling temperature (a traced input: a sweep compiles nothing).
    #[experiment(default = 1.0, range = 0.01..100.0)]
    temperature: Device<f32>,
    /// Learning rate (Adam, constant).
    #[experiment(default = 2e-3)]
    lr: f64,
    /// Micro-batch width (sequences).
    #[experiment(default = 32, range = 1..=65536)]
    batch: usize,
    /// Training windows per epoch (random offsets).
    #[experiment(default = 16000, range = 1..)]
    train_windows: usize,
    /// Most validation (and test) windows.
    #[experiment(default = 256, range = 1..)]
    eval_windows: usize,
    /// Epochs.
    #[experiment(default = 1)]
    max_epochs: u64,
    /// A UTF-8 file or a folder of *.rs / *.md files; empty: this repository.
    corpus: String,
}

/// Named configurations (`--preset NAME`).
fn presets() -> Vec<Preset> {
    vec![
        // Seconds, even in a debug build: the tests' configuration.
        Preset::new("quick")
            .set("dim", 32usize)
            .set("heads", 2usize)
            .set("layers", 1usize)
            .set("context", 32usize)
            .set("batch", 16usize)
            .set("train_windows", 2400usize)
            .set("eval_windows", 64usize),
        // The benchmark model of `peers/gpt_step.py`.
        Preset::new("bench")
            .set("dim", 256usize)
            .set("layers", 4usize)
            .set("context", 128usize)
            .set("batch", 16usize),
    ]
}

/// What `forward` takes: token ids `[n, context]`.
#[derive(Fields)]
struct Tokens<T> {
    ids: T,
}

/// What `loss` takes: the next token at every position.
#[derive(Fields)]
struct Next<T> {
    next: T,
}

/// Forward's outputs, both `[n, context, 96]`.
#[derive(Tree)]
struct Heads {
    /// Next-character scores.
    logits: Tensor,
    /// `softmax(logits / temperature)`: what `sample` draws from.
    probs: Tensor,
}

/// The repository root (two levels above this example's manifest), or the
/// current directory when the build tree is gone.
fn default_corpus() -> PathBuf {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    if root.join("Cargo.toml").is_file() {
        root
    } else {
        PathBuf::from(".")
    }
}

/// Bits per character of `logits [n, t, v]` against `next [n, t]`, as
/// (sum, count) over every position, computed in f64.
fn bits_per_char(out: &nitro_run::HostOutputs, batch: &Batch) -> (f64, f64) {
    let (Some(logits), Some(next)) = (out.get("logits"), batch.get("next")) else {
        return (0.0, 0.0);
    };
    let v = logits.shape().last().copied().unwrap_or(1);
    let scores = logits.to_f32_vec();
    let labels: &[i32] = next.as_slice().unwrap_or(&[]);
    let mut bits = 0.0;
    for (row, &y) in scores.chunks(v).zip(labels) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let lse = m + row.iter().map(|&s| (s as f64 - m).exp()).sum::<f64>().ln();
        bits += (lse - row[y as usize] as f64) / std::f64::consts::LN_2;
    }
    (bits, labels.len() as f64)
}

/// SplitMix64: the sampler's seeded draws (counter-free, tiny).
struct Draws(u64);

impl Draws {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl nitro_run::Experiment for TinyGpt {
    type Model = Chain;
    type Inputs = Tokens<Tensor>;
    type Targets = Next<Tensor>;
    type Outputs = Heads;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = gpt(&GptConfig {
            vocab: CharVocab::SIZE,
            context: *self.context,
            dim: *self.dim,
            heads: *self.heads,
            layers: *self.layers,
            dropout: 0.0,
        });
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        let path = if self.corpus.is_empty() {
            default_corpus()
        } else {
            PathBuf::from(&self.corpus)
        };
        let ids = CharVocab::encode(&read_corpus(&path)?);
        let splits = char_lm_splits(
            &ids,
            &CharLmConfig {
                context: *self.context,
                block: 4096,
                val_every: 20,
                train_windows: self.train_windows,
                max_eval_windows: self.eval_windows,
                seed: 0,
            },
        )?;
        eprintln!(
            "corpus {}: {} characters, unigram entropy {:.4} bits/char",
            path.display(),
            ids.len(),
            unigram_entropy_bits(&ids)
        );
        Ok(splits)
    }

    fn forward(
        e: &TinyGptView<Tensor>,
        model: &Chain,
        cx: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Tokens<Tensor>,
    ) -> (Heads, Params<Tensor>) {
        let mut st = st.clone();
        let logits = model.forward(cx, ps, &mut st, "", &x.ids);
        let t = e.temperature.cast(logits.dtype());
        let probs = softmax(&(&logits / &t), 2);
        (Heads { logits, probs }, st)
    }

    fn loss(_: &TinyGptView<Tensor>, out: &Heads, y: Next<Tensor>) -> Tensor {
        softmax_cross_entropy(&out.logits, &y.next, 0.0)
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![Metric::new("bpc", bits_per_char).reads(&["logits"], &["next"])]
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn max_epochs(&self) -> u64 {
        self.max_epochs
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adam(self.lr)
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from("runs/tiny_gpt")
    }

    fn sample(model: &mut dyn Predictor<Self>, r: &SampleRequest) -> Result<String, HookError> {
        let t = *model.experiment().context;
        let mut ids = CharVocab::encode(&r.prompt);
        if ids.is_empty() {
            ids.push(CharVocab::id('\n'));
        }
        let mut draws = Draws(r.seed);
        for _ in 0..r.steps {
            // The last `t` characters, right-padded: causal attention keeps
            // the padding from reaching the last real position.
            let window = &ids[ids.len().saturating_sub(t)..];
            let at = window.len() - 1;
            let mut row = window.to_vec();
            row.resize(t, 0);
            let mut batch = Batch::new();
            batch.insert("ids", HostArray::from_vec(&[1, t], row)?)?;
            let out = model.predict_batch(&batch)?;
            let probs = out.get("probs").ok_or("forward returned no `probs`")?;
            let v = CharVocab::SIZE;
            let p = &probs.to_f32_vec()[at * v..(at + 1) * v];
            let mut u = draws.uniform() * p.iter().map(|&x| x as f64).sum::<f64>();
            let mut next = v - 1;
            for (i, &pi) in p.iter().enumerate() {
                u -= pi as f64;
                if u < 0.0 {
                    next = i;
                    break;
                }
            }
            ids.push(next as i32);
        }
        Ok(CharVocab::decode(&ids))
    }
}

fn main() {
    nitro_run::cli::main::<TinyGpt>()
}
