//! Checkpoints store every dtype as itself: a run whose state holds f16,
//! bf16, u8, bool, i64, f64 and i32 arrays (with NaN payloads, negative
//! zeros and subnormals where the type has them) resumes into a new handle
//! with every array bit-identical and of its own dtype, and the file holds
//! each as that dtype.

mod common;

use std::path::PathBuf;

use common::{dataset, X, Y};
use nitro_data::{InMemory, Splits};
use nitro_device::{bf16, f16};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::{Array, HostBuffer, Tensor};
use nitro_markers::Experiment;
use nitro_run::{Distributed, HookError, Logger, ModelParts, Nitro, Progress};

#[derive(Experiment, Debug)]
struct EveryDtype {
    dir: String,
}

/// One state array per dtype, each with the bit patterns a lossy path
/// would change.
fn state() -> Params<Array> {
    let nan_payload = f32::from_bits(0x7fc0_1234);
    let arrays = [
        (
            "f16",
            Array::new(
                &[4],
                vec![
                    f16::from_bits(0x7e01),
                    f16::from_bits(0x8000),
                    f16::from_bits(0x0001),
                    f16::from_f32(65504.0),
                ],
            ),
        ),
        (
            "bf16",
            Array::new(
                &[3],
                vec![
                    bf16::from_bits(0x7fc1),
                    bf16::from_bits(0x8000),
                    bf16::from_bits(0x0001),
                ],
            ),
        ),
        ("u8", Array::new(&[2, 2], vec![0u8, 1, 200, 255])),
        ("bool", Array::new(&[3], vec![true, false, true])),
        ("i64", Array::new(&[2], vec![i64::MIN, (1i64 << 53) + 1])),
        (
            "f64",
            Array::new(&[2], vec![f64::from_bits(0x7ff8_0000_0000_0abc), 1e-310]),
        ),
        ("i32", Array::new(&[1], vec![i32::MIN])),
        ("f32", Array::new(&[2], vec![nan_payload, -0.0f32])),
    ];
    let mut st = Params::new();
    for (name, a) in arrays {
        st.insert(format!("keep.{name}"), a.unwrap());
    }
    st
}

impl nitro_run::Experiment for EveryDtype {
    type Model = Dense;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Dense>, HookError> {
        let model = Dense::new(4, 3);
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: state(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        let train: InMemory = dataset(8, 1);
        Ok(Splits {
            train,
            val: None,
            test: None,
        })
    }

    fn forward(
        _: &EveryDtypeView<Tensor>,
        m: &Dense,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (m.apply(ps, "", &x.x), st.clone())
    }

    fn loss(_: &EveryDtypeView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0)
    }

    fn batch_size(&self) -> usize {
        4
    }
    fn max_epochs(&self) -> u64 {
        1
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from(&self.dir)
    }
    fn logger(&self) -> Logger {
        Logger {
            progress: Progress::Off,
            every: 1000,
        }
    }
}

/// dtype and little-endian bytes of every array: equal means bit-identical.
fn raw(arrays: &std::collections::BTreeMap<String, Array>) -> Vec<(String, String, Vec<u8>)> {
    arrays
        .iter()
        .map(|(n, a)| (n.clone(), a.spec().to_string(), a.data().to_le_bytes()))
        .collect()
}

#[test]
fn resume_keeps_every_dtype_bit_for_bit() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().display().to_string();
    let mut n = Nitro::new(EveryDtype { dir: dir.clone() }).unwrap();
    n.train().unwrap();
    let (params, state) = (n.params(), n.state());
    // The state went through a compiled program unchanged, so the handle
    // itself is lossless; the checkpoint must be too.
    assert_eq!(raw(&state), raw(&state_map()));

    let mut back = Nitro::new(EveryDtype { dir }).unwrap();
    let path = back.resume().unwrap().expect("train saved a checkpoint");
    // In the file, each array is stored as its own dtype (not widened to f32).
    let file = nitro_ckpt::load(&path).unwrap();
    for (name, a) in &state {
        let stored = file.tensor(&format!("state/{name}")).unwrap();
        assert_eq!(stored.dtype, a.dtype(), "{name} stored as {}", stored.dtype);
        assert_eq!(stored.bytes, a.data().to_le_bytes(), "{name}");
    }
    assert_eq!(raw(&back.state()), raw(&state));
    assert_eq!(raw(&back.params()), raw(&params));
    for (name, a) in back.state() {
        let want = &state[&name];
        assert_eq!(a.dtype(), want.dtype(), "{name}");
        assert!(
            !matches!(a.data(), HostBuffer::F32(_)) || name.ends_with("f32"),
            "{name} came back as f32"
        );
    }
}

fn state_map() -> std::collections::BTreeMap<String, Array> {
    state().into_iter().collect()
}
