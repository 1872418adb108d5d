//! The built-in digits: deterministic, well-formed, learnable, writable as
//! IDX. The full calibration (60k/10k, both models) is `#[ignore]`d; run it
//! with `cargo test --release -p nitro-data --test digits -- --ignored`.

mod common;

use common::trainer;
use nitro_data::digits::{generate, generate_u8, write_idx_files, DigitsConfig, Split};
use nitro_data::loaders::read_idx_pair;
use nitro_data::{DType, Dataset};

#[test]
fn deterministic_shapes_and_ranges() {
    let cfg = DigitsConfig {
        train: 300,
        val: 50,
        test: 100,
        seed: 5,
    };
    let a = generate(&cfg).unwrap();
    assert_eq!(a, generate(&cfg).unwrap());
    assert_eq!(
        (
            a.train.len(),
            a.val.as_ref().unwrap().len(),
            a.test.as_ref().unwrap().len()
        ),
        (300, 50, 100)
    );
    let specs = a.train.fields();
    assert_eq!(specs[0].name, "image");
    assert_eq!(
        (specs[0].dtype, specs[0].sample_shape.clone()),
        (DType::F32, vec![28, 28])
    );
    assert_eq!(
        (specs[1].name.as_str(), specs[1].dtype),
        ("label", DType::I32)
    );
    let img = a
        .train
        .as_fields()
        .get("image")
        .unwrap()
        .as_slice::<f32>()
        .unwrap();
    assert!(img.iter().all(|&v| (0.0..=1.0).contains(&v)));
    let labels = a
        .train
        .as_fields()
        .get("label")
        .unwrap()
        .as_slice::<i32>()
        .unwrap();
    let mut counts = [0; 10];
    labels.iter().for_each(|&l| counts[l as usize] += 1);
    assert!(counts.iter().all(|&c| c > 10), "{counts:?}");
    // A prefix of a larger generation is the smaller generation; splits and seeds differ.
    let (small, _) = generate_u8(10, 5, Split::Train);
    let (large, _) = generate_u8(20, 5, Split::Train);
    assert_eq!(small[..], large[..small.len()]);
    assert_ne!(generate_u8(10, 5, Split::Test).0, small);
    assert_ne!(generate_u8(10, 6, Split::Train).0, small);
    assert_eq!(
        generate(&DigitsConfig { test: 0, ..cfg }).unwrap().test,
        None
    );
}

#[test]
fn written_idx_files_read_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DigitsConfig {
        train: 64,
        val: 0,
        test: 32,
        seed: 11,
    };
    write_idx_files(dir.path(), &cfg).unwrap();
    let train = read_idx_pair(
        dir.path().join("train-images-idx3-ubyte"),
        dir.path().join("train-labels-idx1-ubyte"),
    )
    .unwrap();
    let test = read_idx_pair(
        dir.path().join("t10k-images-idx3-ubyte"),
        dir.path().join("t10k-labels-idx1-ubyte"),
    )
    .unwrap();
    let g = generate(&cfg).unwrap();
    assert_eq!(train, g.train);
    assert_eq!(Some(test), g.test);
}

/// Fast sanity check: a linear model learns the classes from little data.
#[test]
fn linear_model_learns_quickly() {
    let s = generate(&DigitsConfig {
        train: 3000,
        val: 0,
        test: 1000,
        seed: 3,
    })
    .unwrap();
    let (x, y) = trainer::xy(&s.train);
    let (xt, yt) = trainer::xy(s.test.as_ref().unwrap());
    let m = trainer::train(&x, &y, 0, 3, 0.05, 1);
    let acc = trainer::accuracy(&m, &xt, &yt);
    assert!(acc > 0.75, "linear accuracy {acc}");
}

/// MNIST-like calibration: linear ~90-93%, 1-hidden-layer MLP > 97%.
#[test]
#[ignore = "slow: trains on 60k images; run in release"]
fn calibration_matches_mnist() {
    let s = generate(&DigitsConfig::default()).unwrap();
    let (x, y) = trainer::xy(&s.train);
    let (xt, yt) = trainer::xy(s.test.as_ref().unwrap());
    let lin = trainer::accuracy(&trainer::train(&x, &y, 0, 10, 0.05, 1), &xt, &yt);
    let mlp = trainer::accuracy(&trainer::train(&x, &y, 256, 10, 0.02, 1), &xt, &yt);
    eprintln!("linear {lin:.4}, mlp {mlp:.4}");
    assert!((0.90..=0.935).contains(&lin), "linear accuracy {lin}");
    assert!(mlp > 0.97, "mlp accuracy {mlp}");
}
