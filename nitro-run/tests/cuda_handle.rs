//! The handle on a GPU (`Nitro::use_device`). Everywhere: asking for CUDA
//! is either accepted (a GPU is there) or an error that names the device,
//! what is missing and the fix, and the handle stays usable on the CPU.
//! Where a driver is found: the digits MLP trains on CUDA to the losses the
//! CPU reaches, params come back to the host at the sync point, and a
//! checkpoint written from GPU values resumes on the CPU. Without a driver
//! the GPU tests print one "skipped: no CUDA driver" line and pass.

mod common;

use std::path::PathBuf;
use std::sync::Mutex;

use common::tiny;
use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::Splits;
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::{Device, Tensor};
use nitro_markers::{Experiment, ExperimentFields, Fields, GraphConst};
use nitro_run::{Distributed, HookError, Metric, ModelParts, Nitro, Optimizer, RunError};

static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    nitro_run::set_config_report(false);
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn use_device_cuda_runs_there_or_names_what_is_missing_and_the_fix() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    assert_eq!(n.execution_device(), Device::Cpu);
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        n.use_device(Device::Cuda(0))
    }))
    .expect("asking for a GPU never panics");
    match asked {
        Ok(()) => assert_eq!(n.execution_device(), Device::Cuda(0)),
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, RunError::Device { .. }), "{msg}");
            assert!(msg.starts_with("cannot run on cuda:0: "), "{msg}");
            assert!(msg.contains("--device cpu"), "{msg}");
            if cfg!(feature = "cuda") {
                assert!(msg.contains("no CUDA driver found"), "{msg}");
            } else {
                assert!(
                    msg.contains("nitro was built without CUDA; rebuild with `--features cuda`"),
                    "{msg}"
                );
            }
            // Refused: the handle still runs on the CPU.
            assert_eq!(n.execution_device(), Device::Cpu);
            let report = n.train().unwrap();
            assert!(report.steps > 0);
        }
    }
    // Back to the CPU is always possible.
    n.use_device(Device::Cpu).unwrap();
    assert_eq!(n.execution_device(), Device::Cpu);
}

#[test]
fn a_missing_gpu_ordinal_is_a_run_error_not_a_panic() {
    let _g = lock();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    let e = n.use_device(Device::Cuda(4096)).unwrap_err();
    assert!(e.to_string().contains("cuda:4096"), "{e}");
}

/// The digits MLP of `examples/digits_mlp.rs`, small: 1024 samples,
/// width 64, batch 128, Adam, no schedule.
#[derive(Experiment, Debug)]
struct Digits {
    #[experiment(default = 64)]
    width: GraphConst<usize>,
    dir: String,
    #[experiment(default = 2)]
    epochs: u64,
}

#[derive(Fields)]
struct Images<T> {
    image: T,
}

#[derive(Fields)]
struct Labels<T> {
    label: T,
}

impl nitro_run::Experiment for Digits {
    type Model = Chain;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new()
            .push(Dense::new(784, *self.width).with(Activation::Relu))
            .push(Dense::new(*self.width, 10));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(generate(&DigitsConfig {
            train: 1024,
            val: 256,
            test: 256,
            seed: 0,
        })?)
    }
    fn forward(
        _: &DigitsView<Tensor>,
        model: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        (model.apply(ps, "", &x.image.reshape(&[n, 784])), st.clone())
    }
    fn loss(_: &DigitsView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.label, 0.0)
    }
    fn metrics(&self) -> Vec<Metric> {
        vec![Metric::accuracy("output", "label")]
    }
    fn batch_size(&self) -> usize {
        128
    }
    fn max_epochs(&self) -> u64 {
        self.epochs
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adamw(2e-3, 1e-4)
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from(&self.dir)
    }
}

fn digits(dir: &std::path::Path) -> Digits {
    let mut e = Digits::defaults();
    e.dir = dir.display().to_string();
    e
}

fn close(a: f64, b: f64, what: &str) {
    // f32 on both sides; cuBLAS and fused kernels sum in another order.
    assert!(
        (a - b).abs() <= 2e-3 * (1.0 + a.abs().max(b.abs())),
        "{what}: cuda {a} vs cpu {b}"
    );
}

#[test]
fn the_digits_mlp_trains_on_cuda_to_the_cpu_losses() {
    let _g = lock();
    if let Err(e) = Device::Cuda(0).check() {
        eprintln!("the_digits_mlp_trains_on_cuda_to_the_cpu_losses: skipped: no CUDA driver ({e})");
        return;
    }
    let (dc, dg) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut cpu = Nitro::new(digits(dc.path())).unwrap();
    let mut gpu = Nitro::new(digits(dg.path())).unwrap();
    gpu.use_device(Device::Cuda(0)).unwrap();
    let (rc, rg) = (cpu.train().unwrap(), gpu.train().unwrap());
    assert_eq!(rc.steps, rg.steps);
    for (epoch, ((_, mc), (_, mg))) in cpu.history().iter().zip(gpu.history()).enumerate() {
        for (k, v) in mc {
            close(mg[k], *v, &format!("epoch {epoch} {k}"));
        }
    }
    // The sync point ran: the host params are the trained ones.
    for ((name, a), (_, b)) in cpu.params().iter().zip(gpu.params().iter()) {
        for (x, y) in a.to_f32_vec().iter().zip(b.to_f32_vec()) {
            close(y as f64, *x as f64, name);
        }
    }
    let (tc, tg) = (cpu.evaluate("test").unwrap(), gpu.evaluate("test").unwrap());
    close(tg["loss"], tc["loss"], "test loss");
    // Predict matches too, padded final chunk included.
    let set = &gpu.data().test.clone().unwrap();
    use nitro_data::Dataset;
    let batch = set
        .gather(&(0..200).collect::<Vec<_>>(), &["image"])
        .unwrap();
    let (pc, pg) = (cpu.predict(&batch).unwrap(), gpu.predict(&batch).unwrap());
    for (x, y) in pc["output"]
        .to_f32_vec()
        .iter()
        .zip(pg["output"].to_f32_vec())
    {
        close(y as f64, *x as f64, "predict");
    }
    // A checkpoint written from GPU values resumes on the CPU and keeps training.
    let mut more = digits(dg.path());
    more.epochs = 3;
    let mut resumed = Nitro::new(more).unwrap();
    resumed
        .resume()
        .unwrap()
        .expect("the GPU run saved a checkpoint");
    assert_eq!(resumed.params().len(), gpu.params().len());
    for ((name, a), (_, b)) in resumed.params().iter().zip(gpu.params().iter()) {
        assert_eq!(
            a.to_f32_vec(),
            b.to_f32_vec(),
            "{name} survives the checkpoint"
        );
    }
    resumed.train().unwrap();
    gpu.use_device(Device::Cpu).unwrap();
    assert_eq!(gpu.execution_device(), Device::Cpu);
    let back = gpu.evaluate("test").unwrap();
    close(back["loss"], tg["loss"], "after switching back to the CPU");
}

#[test]
fn set_device_and_resume_reach_the_resident_copies() {
    let _g = lock();
    if let Err(e) = Device::Cuda(0).check() {
        eprintln!("set_device_and_resume_reach_the_resident_copies: skipped: no CUDA driver ({e})");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    n.use_device(Device::Cuda(0)).unwrap();
    let batch = common::dataset(4, 9)
        .gather(&[0, 1, 2, 3], &["x", "y"])
        .unwrap();
    use nitro_data::Dataset;
    let base = n.predict(&batch).unwrap()["output"].to_f32_vec();
    n.set_device("temperature", 2.0f32).unwrap();
    let hot = n.predict(&batch).unwrap()["output"].to_f32_vec();
    for (b, h) in base.iter().zip(&hot) {
        assert!((h * 2.0 - b).abs() < 1e-4, "{h} * 2 vs {b}");
    }
    // Train on the GPU, then load the initial params back: the resident
    // copies are replaced, and predict sees the loaded values.
    let initial = n.params();
    n.train().unwrap();
    let trained = n.predict(&batch).unwrap()["output"].to_f32_vec();
    assert_ne!(trained, hot, "training moved the params");
    let path = d.path().join("initial.safetensors");
    nitro_run::safetensors::write(&path, &initial, &Default::default()).unwrap();
    n.load_safetensors(&path).unwrap();
    let again = n.predict(&batch).unwrap()["output"].to_f32_vec();
    for (a, h) in again.iter().zip(&hot) {
        assert!((a - h).abs() < 1e-5, "{a} vs {h}");
    }
}
