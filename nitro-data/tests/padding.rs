//! Pad then slice is the identity on every leaf of nested outputs, and
//! metrics over a padded pass equal those over an unpadded pass.

use nitro_data::{
    pad_to_width, slice_outputs, BatchIter, EpochOrder, Fields, HostArray, InMemory, OutputError,
    OutputTree, PadFill,
};
use proptest::prelude::*;
use std::sync::Arc;

/// A "model": per-sample outputs computed row by row from `x`, as a nested
/// tree (named record holding an array, a tuple of two arrays of other
/// dtypes and ranks).
fn forward(batch: &Fields) -> OutputTree {
    let x = batch.get("x").unwrap();
    let (n, k) = (x.shape()[0], x.shape()[1]);
    let x = x.as_slice::<f32>().unwrap();
    let logits: Vec<f32> = x.iter().map(|v| v * 2.0 - 1.0).collect();
    let score: Vec<f64> = x.chunks(k).map(|r| r.iter().sum::<f32>() as f64).collect();
    let flag: Vec<bool> = x.chunks(k).map(|r| r[0] > 0.5).collect();
    OutputTree::Named(vec![
        (
            "logits".into(),
            OutputTree::Leaf(HostArray::from_vec(&[n, k], logits).unwrap()),
        ),
        (
            "aux".into(),
            OutputTree::Tuple(vec![
                OutputTree::Leaf(HostArray::from_vec(&[n], score).unwrap()),
                OutputTree::Named(vec![(
                    "flag".into(),
                    OutputTree::Leaf(HostArray::from_vec(&[n, 1], flag).unwrap()),
                )]),
            ]),
        ),
    ])
}

/// Accuracy-style metric: (correct, count) of argmax(logits) == label.
fn metric(out: &OutputTree, labels: &[i32]) -> (usize, usize) {
    let OutputTree::Named(v) = out else { panic!() };
    let OutputTree::Leaf(l) = &v[0].1 else {
        panic!()
    };
    assert_eq!(l.shape()[0], labels.len(), "metrics must never see padding");
    let correct = l
        .as_slice::<f32>()
        .unwrap()
        .chunks(l.shape()[1])
        .zip(labels)
        .filter(|(r, &y)| {
            let arg = r
                .iter()
                .enumerate()
                .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                .0;
            arg as i32 == y
        })
        .count();
    (correct, labels.len())
}

fn data(n: usize, k: usize, seed: u64) -> InMemory {
    let x: Vec<f32> = (0..n * k)
        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 1000.0)
        .collect();
    let y: Vec<i32> = (0..n)
        .map(|i| ((i as u64 * 40503 + seed) % k as u64) as i32)
        .collect();
    InMemory::from_pairs([
        ("x", HostArray::from_vec(&[n, k], x).unwrap()),
        ("label", HostArray::from_vec(&[n], y).unwrap()),
    ])
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn pad_then_slice_is_identity_on_every_leaf(real in 1usize..40, extra in 0usize..40, k in 1usize..6, zeros: bool, seed: u64) {
        let width = real + extra;
        let d = data(real, k, seed);
        let fill = if zeros { PadFill::Zeros } else { PadFill::RepeatLast };
        let (padded, r) = pad_to_width(d.as_fields(), width, fill).unwrap();
        prop_assert_eq!(r, real);
        prop_assert!(padded.iter().all(|(_, a)| a.rows() == width));
        let direct = forward(d.as_fields());
        let sliced = slice_outputs(&forward(&padded), width, real).unwrap();
        prop_assert_eq!(&sliced, &direct);
        prop_assert_eq!(sliced.leaves().len(), 3);
    }

    #[test]
    fn metrics_over_padded_eval_equal_unpadded(n in 1usize..200, width in 1usize..64, k in 2usize..6, seed: u64) {
        let d = Arc::new(data(n, k, seed));
        let labels = d.as_fields().get("label").unwrap().as_slice::<i32>().unwrap().to_vec();
        let unpadded = metric(&forward(d.as_fields()), &labels);
        let mut total = (0, 0);
        for item in BatchIter::new(d.clone(), EpochOrder::sequential(n, width).unwrap(), &["x", "label"]).unwrap() {
            let item = item.unwrap();
            let out = slice_outputs(&forward(&item.batch), width, item.real).unwrap();
            let y = item.batch.get("label").unwrap().as_slice::<i32>().unwrap();
            let y: Vec<i32> = y.iter().take(item.real).copied().collect();
            let (c, m) = metric(&out, &y);
            total = (total.0 + c, total.1 + m);
        }
        prop_assert_eq!(total, unpadded);
    }
}

#[test]
fn slice_outputs_names_the_bad_leaf() {
    let good = OutputTree::Leaf(HostArray::from_vec(&[4, 2], vec![0f32; 8]).unwrap());
    let batch_last = OutputTree::Leaf(HostArray::from_vec(&[2, 4], vec![0f32; 8]).unwrap());
    let tree = OutputTree::Named(vec![
        ("logits".into(), good.clone()),
        (
            "aux".into(),
            OutputTree::Tuple(vec![good.clone(), batch_last]),
        ),
    ]);
    let err = slice_outputs(&tree, 4, 3).unwrap_err();
    assert_eq!(
        err,
        OutputError::BatchNotAxis0 {
            path: "outputs.aux.1".into(),
            shape: vec![2, 4],
            width: 4
        }
    );
    assert!(
        err.to_string().contains("`outputs.aux.1` has shape [2, 4]"),
        "{err}"
    );

    let reduced = OutputTree::Named(vec![
        ("logits".into(), good),
        ("loss".into(), OutputTree::Scalar(0.3)),
    ]);
    let err = slice_outputs(&reduced, 4, 3).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("output leaf `outputs.loss` is not an array"),
        "{err}"
    );
}

#[test]
fn pad_errors_are_typed() {
    let d = data(5, 2, 0);
    assert!(pad_to_width(d.as_fields(), 4, PadFill::RepeatLast).is_err());
    assert!(pad_to_width(d.as_fields(), 0, PadFill::RepeatLast).is_err());
    let empty = d.as_fields().slice_rows(0, 0).unwrap();
    assert!(pad_to_width(&empty, 4, PadFill::RepeatLast).is_err());
    let (z, real) = pad_to_width(&empty, 4, PadFill::Zeros).unwrap();
    assert_eq!((z.rows(), real), (4, 0));
}
