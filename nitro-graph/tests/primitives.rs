//! Every primitive: forward against a naive reference written here, and
//! gradient against central finite differences in f64, over random shapes
//! and values (proptest).
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[shape.clone()]` reads better in tests

mod common;

use common::{assert_close, check_grad, run, values};
use nitro_graph::ir::Window;
use nitro_graph::{DType, Tensor};
use proptest::prelude::*;

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 12,
        ..ProptestConfig::default()
    }
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Sum and max of `values(seed)` over `axes` of `shape`, against loops.
fn check_reductions(shape: &[usize], axes: &[usize], seed: u64) {
    let r = shape.len();
    let x = values(shape.iter().product(), seed);
    let out_shape: Vec<usize> = (0..r)
        .filter(|a| !axes.contains(a))
        .map(|a| shape[a])
        .collect();
    let out_strides = strides(&out_shape);
    let mut sum = vec![0.0; out_shape.iter().product()];
    let mut max = vec![f64::NEG_INFINITY; sum.len()];
    for (i, &v) in x.iter().enumerate() {
        let idx = unravel(i, shape);
        let kept = (0..r).filter(|a| !axes.contains(a)).map(|a| idx[a]);
        let o: usize = kept.zip(&out_strides).map(|(i, s)| i * s).sum();
        sum[o] += v;
        max[o] = max[o].max(v);
    }
    let (a1, a2) = (axes.to_vec(), axes.to_vec());
    let shapes = [shape.to_vec()];
    let got_sum = run(&shapes, &[x.clone()], move |_, t| t[0].sum(&a1)).to_f64_vec();
    assert_close(&got_sum, &sum, 1e-12);
    let got_max = run(&shapes, &[x], move |_, t| t[0].max(&a2)).to_f64_vec();
    assert_close(&got_max, &max, 0.0);
}

/// The reduction layouts at sizes that split over threads: pooling
/// (`[n, c, h/2, 2, w/2, 2]` over the window axes), a convolution's bias
/// gradient (NCHW over n, h, w) and a dense one (over the batch).
#[test]
fn large_reductions_split_over_threads() {
    check_reductions(&[32, 6, 12, 2, 12, 2], &[3, 5], 1);
    check_reductions(&[9, 3, 11, 3, 7, 3], &[3, 5], 2);
    check_reductions(&[64, 6, 20, 10], &[0, 2, 3], 3);
    check_reductions(&[300, 1, 257], &[0], 4);
    check_reductions(&[257, 300], &[1], 5);
}

fn shape3() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 1..4)
}

type UnaryCase = (&'static str, fn(&Tensor) -> Tensor, fn(f64) -> f64);
type BinaryCase = (fn(&Tensor, &Tensor) -> Tensor, fn(f64, f64) -> f64);

const UNARY: [UnaryCase; 9] = [
    ("neg", |t| t.neg(), |x| -x),
    ("exp", |t| t.exp(), f64::exp),
    ("tanh", |t| t.tanh(), f64::tanh),
    ("sigmoid", |t| t.sigmoid(), |x| 1.0 / (1.0 + (-x).exp())),
    ("sin", |t| t.sin(), f64::sin),
    ("cos", |t| t.cos(), f64::cos),
    ("abs", |t| t.abs(), f64::abs),
    (
        "log(x^2+1)",
        |t| (t * t + 1.0).log(),
        |x| (x * x + 1.0).ln(),
    ),
    (
        "sqrt(x^2+1), 1/x+2",
        |t| (t * t + 1.0).sqrt() + (t + 2.0).recip(),
        |x| (x * x + 1.0).sqrt() + 1.0 / (x + 2.0),
    ),
];

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn unary_ops(shape in shape3(), seed in 0u64..1000) {
        let n: usize = shape.iter().product();
        let x = values(n, seed);
        for (name, op, reference) in UNARY {
            let y = run(&[shape.clone()], &[x.clone()], |_, t| op(&t[0])).to_f64_vec();
            let want: Vec<f64> = x.iter().map(|&v| reference(v)).collect();
            assert_close(&y, &want, 1e-12);
            let _ = name;
            check_grad(&[shape.clone()], seed, |_, t| op(&t[0]));
        }
    }

    #[test]
    fn binary_ops_with_broadcast(rows in 1usize..4, cols in 1usize..4, seed in 0u64..1000) {
        let (a, b) = (values(rows * cols, seed), values(cols, seed + 1));
        let shapes = [vec![rows, cols], vec![1, cols]];
        let cases: [BinaryCase; 6] = [
            (|x, y| x + y, |x, y| x + y),
            (|x, y| x - y, |x, y| x - y),
            (|x, y| x * y, |x, y| x * y),
            (|x, y| x / (y * y + 1.0), |x, y| x / (y * y + 1.0)),
            (|x, y| x.maximum(y) + x.minimum(y) * 2.0, |x, y| x.max(y) + x.min(y) * 2.0),
            (|x, y| (x * x + 1.0).pow(y), |x, y| (x * x + 1.0).powf(y)),
        ];
        for (op, reference) in cases {
            let got = run(&shapes, &[a.clone(), b.clone()], |_, t| op(&t[0], &t[1])).to_f64_vec();
            let want: Vec<f64> = (0..rows * cols).map(|i| reference(a[i], b[i % cols])).collect();
            assert_close(&got, &want, 1e-12);
            check_grad(&shapes, seed, |_, t| op(&t[0], &t[1]));
        }
    }

    #[test]
    fn compare_select_cast(n in 1usize..8, seed in 0u64..1000) {
        let (a, b) = (values(n, seed), values(n, seed + 7));
        let got = run(&[vec![n], vec![n]], &[a.clone(), b.clone()], |_, t| {
            t[0].lt(&t[1]).select(&t[0], &(&t[1] * 3.0)) + t[0].ge(&t[1]).cast(DType::F64)
        })
        .to_f64_vec();
        let want: Vec<f64> = (0..n).map(|i| if a[i] < b[i] { a[i] } else { b[i] * 3.0 } + (a[i] >= b[i]) as u8 as f64).collect();
        assert_close(&got, &want, 1e-12);
        check_grad(&[vec![n], vec![n]], seed, |_, t| t[0].lt(&t[1]).select(&t[0], &(&t[1] * 3.0)));
        // f32 round trip and float -> int truncation
        let cast = run(&[vec![n]], &[a.clone()], |_, t| (t[0].clone() * 10.0).cast(DType::I32).cast(DType::F64)).to_f64_vec();
        assert_close(&cast, &a.iter().map(|v| (v * 10.0).trunc()).collect::<Vec<_>>(), 0.0);
    }

    #[test]
    fn reductions(shape in shape3(), seed in 0u64..1000, pick in 0usize..7) {
        let r = shape.len();
        let axes: Vec<usize> = (0..r).filter(|a| (pick >> a) & 1 == 1).collect();
        let x = values(shape.iter().product(), seed);
        let out_shape: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).map(|a| shape[a]).collect();
        let out_n: usize = out_shape.iter().product();
        let mut sum = vec![0.0; out_n];
        let mut max = vec![f64::NEG_INFINITY; out_n];
        for (i, &v) in x.iter().enumerate() {
            let idx = unravel(i, &shape);
            let kept: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).map(|a| idx[a]).collect();
            let o: usize = kept.iter().zip(strides(&out_shape)).map(|(i, s)| i * s).sum();
            sum[o] += v;
            max[o] = max[o].max(v);
        }
        let a2 = axes.clone();
        assert_close(&run(&[shape.clone()], &[x.clone()], |_, t| t[0].sum(&a2)).to_f64_vec(), &sum, 1e-12);
        let a3 = axes.clone();
        assert_close(&run(&[shape.clone()], &[x.clone()], |_, t| t[0].max(&a3)).to_f64_vec(), &max, 0.0);
        let a4 = axes.clone();
        check_grad(&[shape.clone()], seed, move |_, t| t[0].sum(&a4));
        let a5 = axes.clone();
        check_grad(&[shape.clone()], seed, move |_, t| t[0].max(&a5));
    }

    /// Reductions over any axes of rank 4-6 tensors (the middle `[R, K, R]`
    /// and pooling `[K, R, K, R]` layouts, the in-place windows and the
    /// permuting fallback), against loops.
    #[test]
    fn reductions_any_layout(shape in prop::collection::vec(1usize..5, 4..7), seed in 0u64..1000, pick in 0usize..64) {
        let axes: Vec<usize> = (0..shape.len()).filter(|a| (pick >> a) & 1 == 1).collect();
        check_reductions(&shape, &axes, seed);
    }

    #[test]
    fn permute_reshape_broadcast(shape in prop::collection::vec(1usize..4, 3), seed in 0u64..1000) {
        let x = values(shape.iter().product(), seed);
        let perm = [2usize, 0, 1];
        let got = run(&[shape.clone()], &[x.clone()], |_, t| t[0].permute(&perm)).to_f64_vec();
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let want: Vec<f64> = (0..x.len())
            .map(|o| {
                let oi = unravel(o, &out_shape);
                let mut si = [0; 3];
                for (d, &p) in perm.iter().enumerate() { si[p] = oi[d]; }
                x[si.iter().zip(strides(&shape)).map(|(i, s)| i * s).sum::<usize>()]
            })
            .collect();
        assert_close(&got, &want, 0.0);
        check_grad(&[shape.clone()], seed, |_, t| t[0].permute(&[2, 0, 1]).reshape(&[t[0].numel()]));
        let s2 = shape.clone();
        let b = run(&[vec![1, shape[1], 1]], &[values(shape[1], seed)], move |_, t| t[0].broadcast_to(&s2)).to_f64_vec();
        let src = values(shape[1], seed);
        let want_b: Vec<f64> = (0..x.len()).map(|i| src[unravel(i, &shape)[1]]).collect();
        assert_close(&b, &want_b, 0.0);
        let s3 = shape.clone();
        check_grad(&[vec![1, shape[1], 1]], seed, move |_, t| t[0].broadcast_to(&s3));
    }

    #[test]
    fn slice_pad_concat(n in 2usize..7, m in 1usize..4, seed in 0u64..1000, start in 0usize..2, stride in 1usize..3) {
        let x = values(n * m, seed);
        let got = run(&[vec![n, m]], &[x.clone()], move |_, t| t[0].slice(&[start, 0], &[n, m], &[stride, 1])).to_f64_vec();
        let want: Vec<f64> = (start..n).step_by(stride).flat_map(|i| x[i * m..(i + 1) * m].to_vec()).collect();
        assert_close(&got, &want, 0.0);
        check_grad(&[vec![n, m]], seed, move |_, t| t[0].slice(&[start, 0], &[n, m], &[stride, 1]));
        let padded = run(&[vec![n, m]], &[x.clone()], |_, t| t[0].pad(&[1, 0], &[0, 2], 9.0)).to_f64_vec();
        for i in 0..n + 1 {
            for j in 0..m + 2 {
                let want = if i >= 1 && j < m { x[(i - 1) * m + j] } else { 9.0 };
                prop_assert_eq!(padded[i * (m + 2) + j], want);
            }
        }
        check_grad(&[vec![n, m]], seed, |_, t| t[0].pad(&[1, 0], &[0, 2], 9.0));
        let y = values(n * 2, seed + 3);
        let cat = run(&[vec![n, m], vec![n, 2]], &[x.clone(), y.clone()], |_, t| Tensor::concat(&[t[0].clone(), t[1].clone()], 1).unwrap()).to_f64_vec();
        for i in 0..n {
            prop_assert_eq!(&cat[i * (m + 2)..i * (m + 2) + m], &x[i * m..(i + 1) * m]);
            prop_assert_eq!(&cat[i * (m + 2) + m..(i + 1) * (m + 2)], &y[i * 2..(i + 1) * 2]);
        }
        check_grad(&[vec![n, m], vec![n, 2]], seed, |_, t| Tensor::concat(&[t[0].clone(), t[1].clone()], 1).unwrap());
    }

    #[test]
    fn matmul_all_transposes(m in 1usize..5, k in 1usize..5, n in 1usize..5, seed in 0u64..1000) {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a_shape = if ta { vec![k, m] } else { vec![m, k] };
            let b_shape = if tb { vec![n, k] } else { vec![k, n] };
            let (a, b) = (values(m * k, seed), values(k * n, seed + 1));
            let got = run(&[a_shape.clone(), b_shape.clone()], &[a.clone(), b.clone()], |_, t| t[0].matmul_t(&t[1], ta, tb)).to_f64_vec();
            let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
            let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
            let want: Vec<f64> = (0..m * n).map(|e| (0..k).map(|p| at(e / n, p) * bt(p, e % n)).sum()).collect();
            assert_close(&got, &want, 1e-12);
            check_grad(&[a_shape, b_shape], seed, |_, t| t[0].matmul_t(&t[1], ta, tb));
        }
    }

    #[test]
    fn batched_matmul(batch in 1usize..3, m in 1usize..4, k in 1usize..4, n in 1usize..4, seed in 0u64..1000) {
        let shapes = [vec![batch, m, k], vec![batch, k, n]];
        let (a, b) = (values(batch * m * k, seed), values(batch * k * n, seed + 1));
        let got = run(&shapes, &[a.clone(), b.clone()], |_, t| t[0].matmul(&t[1])).to_f64_vec();
        let want: Vec<f64> = (0..batch * m * n)
            .map(|e| {
                let (bi, i, j) = (e / (m * n), (e / n) % m, e % n);
                (0..k).map(|p| a[bi * m * k + i * k + p] * b[bi * k * n + p * n + j]).sum()
            })
            .collect();
        assert_close(&got, &want, 1e-12);
        check_grad(&shapes, seed, |_, t| t[0].matmul(&t[1]));
    }

    #[test]
    fn take_and_scatter_add(rows in 1usize..5, width in 1usize..4, idx in prop::collection::vec(0i32..5, 1..6), seed in 0u64..1000) {
        let idx: Vec<i32> = idx.into_iter().map(|i| i % rows as i32).collect();
        let table = values(rows * width, seed);
        let ids = idx.clone();
        let got = run(&[vec![rows, width]], &[table.clone()], move |tr, t| {
            let i = tr.literal(&ids.iter().map(|&v| v as f64).collect::<Vec<_>>(), &[ids.len()], DType::I32);
            t[0].take(&i)
        })
        .to_f64_vec();
        let want: Vec<f64> = idx.iter().flat_map(|&r| table[r as usize * width..(r as usize + 1) * width].to_vec()).collect();
        assert_close(&got, &want, 0.0);
        let ids = idx.clone();
        check_grad(&[vec![rows, width]], seed, move |tr, t| {
            let i = tr.literal(&ids.iter().map(|&v| v as f64).collect::<Vec<_>>(), &[ids.len()], DType::I32);
            t[0].take(&i)
        });
        let ids = idx.clone();
        check_grad(&[vec![idx.len(), width]], seed, move |tr, t| {
            let i = tr.literal(&ids.iter().map(|&v| v as f64).collect::<Vec<_>>(), &[ids.len()], DType::I32);
            t[0].scatter_add(&i, rows)
        });
    }
}

proptest! {
    #![proptest_config(cfg())]

    /// im2col against loops written here; col2im as its adjoint
    /// (`<im2col(x), y> == <x, col2im(y)>` for every x, y) and by finite
    /// differences; both over strides, padding and non-square windows.
    #[test]
    fn im2col_and_col2im(n in 1usize..3, c in 1usize..3, h in 1usize..6, w in 1usize..6,
                         kh in 1usize..4, kw in 1usize..4, stride in 1usize..3, pad in 0usize..3,
                         seed in 0u64..1000) {
        let window = Window { kernel: [kh, kw], stride, padding: pad };
        prop_assume!(window.output(h, w).is_some());
        let (oh, ow) = window.output(h, w).unwrap();
        let image = vec![n, c, h, w];
        let x = values(n * c * h * w, seed);
        let got = run(&[image.clone()], &[x.clone()], |_, t| t[0].im2col(window)).to_f64_vec();
        let cols = n * oh * ow;
        let mut want = vec![0.0; c * kh * kw * cols];
        for (ci, i, j, b, y, xo) in itertools6(c, kh, kw, n, oh, ow) {
            let (iy, ix) = ((y * stride + i) as isize - pad as isize, (xo * stride + j) as isize - pad as isize);
            if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                want[((ci * kh + i) * kw + j) * cols + (b * oh + y) * ow + xo] =
                    x[((b * c + ci) * h + iy as usize) * w + ix as usize];
            }
        }
        assert_close(&got, &want, 0.0);
        let shape = vec![c * kh * kw, cols];
        let y = values(shape.iter().product(), seed + 7);
        let back = run(&[shape.clone()], &[y.clone()], |_, t| t[0].col2im(&[n, c, h, w], window)).to_f64_vec();
        let lhs: f64 = got.iter().zip(&y).map(|(a, b)| a * b).sum();
        let rhs: f64 = x.iter().zip(&back).map(|(a, b)| a * b).sum();
        prop_assert!((lhs - rhs).abs() <= 1e-12 * (1.0 + lhs.abs()), "{lhs} vs {rhs}");
        check_grad(&[image], seed, |_, t| t[0].im2col(window));
        check_grad(&[shape], seed, |_, t| t[0].col2im(&[n, c, h, w], window));
    }
}

/// Every index of a 6-deep loop nest, outermost first.
fn itertools6(
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
    f: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize, usize, usize)> {
    (0..a * b * c * d * e * f).map(move |t| {
        (
            t / (b * c * d * e * f),
            (t / (c * d * e * f)) % b,
            (t / (d * e * f)) % c,
            (t / (e * f)) % d,
            (t / f) % e,
            t % f,
        )
    })
}

#[test]
fn iota_and_random_are_deterministic_and_uniform() {
    let y = run(&[vec![1]], &[vec![0.0]], |tr, _| {
        tr.iota(&[2, 3], 1, DType::F64)
    })
    .to_f64_vec();
    assert_eq!(y, vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    let draw = |key: i32| {
        run(&[vec![1]], &[vec![0.0]], move |tr, _| {
            let k = tr.scalar(key as f64, DType::I32);
            tr.random_uniform(&k, &[4096], DType::F64)
        })
        .to_f64_vec()
    };
    let (a, b, c) = (draw(1), draw(1), draw(2));
    assert_eq!(a, b, "same key, same stream");
    assert_ne!(a, c, "another key, another stream");
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
    assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn sign_floor_and_every_comparison(n in 1usize..10, seed in 0u64..1000) {
        let x: Vec<f64> = values(n, seed).iter().map(|v| v * 4.0).collect();
        let y = values(n, seed + 9);
        let sign = run(&[vec![n]], &[x.clone()], |_, t| t[0].sign()).to_f64_vec();
        let floor = run(&[vec![n]], &[x.clone()], |_, t| t[0].floor()).to_f64_vec();
        for i in 0..n {
            prop_assert_eq!(sign[i], if x[i] > 0.0 { 1.0 } else if x[i] < 0.0 { -1.0 } else { 0.0 });
            prop_assert_eq!(floor[i], x[i].floor());
        }
        check_grad(&[vec![n]], seed, |_, t| t[0].floor() + t[0].sign() + &t[0] * 2.0);
        type Cmp = (fn(&Tensor, &Tensor) -> Tensor, fn(f64, f64) -> bool);
        let cases: [Cmp; 6] = [
            (|a, b| a.eq_t(b), |a, b| a == b),
            (|a, b| a.ne_t(b), |a, b| a != b),
            (|a, b| a.lt(b), |a, b| a < b),
            (|a, b| a.le(b), |a, b| a <= b),
            (|a, b| a.gt(b), |a, b| a > b),
            (|a, b| a.ge(b), |a, b| a >= b),
        ];
        // Compare against itself too, so the equal case is exercised.
        let mut b = y.clone();
        b[0] = x[0];
        for (op, reference) in cases {
            let got = run(&[vec![n], vec![n]], &[x.clone(), b.clone()], |_, t| op(&t[0], &t[1]).cast(DType::F64)).to_f64_vec();
            let want: Vec<f64> = (0..n).map(|i| reference(x[i], b[i]) as u8 as f64).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn scatter_add_forward(rows in 1usize..5, width in 1usize..4, idx in prop::collection::vec(0i32..5, 1..6), seed in 0u64..1000) {
        let idx: Vec<i32> = idx.into_iter().map(|i| i % rows as i32).collect();
        let upd = values(idx.len() * width, seed);
        let ids = idx.clone();
        let got = run(&[vec![idx.len(), width]], &[upd.clone()], move |tr, t| {
            let i = tr.literal(&ids.iter().map(|&v| v as f64).collect::<Vec<_>>(), &[ids.len()], DType::I32);
            t[0].scatter_add(&i, rows)
        })
        .to_f64_vec();
        let mut want = vec![0.0; rows * width];
        for (k, &r) in idx.iter().enumerate() {
            for j in 0..width {
                want[r as usize * width + j] += upd[k * width + j];
            }
        }
        assert_close(&got, &want, 1e-12);
    }
}

/// Products whose shapes take the CPU's special paths, against loops: a
/// small output over a long contraction (a weight gradient summed over a
/// batch: the k-split path), a transposed right operand with many rows
/// (transposed once, then multiplied untransposed), a narrow output and
/// a tall one (both split by rows; tall with a transposed left operand,
/// and with a transposed right one, transposed once and then split), on
/// sizes off the tiles, in f64 and in f32.
#[test]
fn special_path_matmuls_match_loops() {
    let cases = [
        (3, 40_000, 5, false, false),
        (3, 40_000, 5, true, false),
        (70, 37, 45, false, true),
        (130, 33, 67, true, true),
        (333, 100, 10, false, false),
        (333, 100, 10, true, true),
        (301, 70, 150, true, false),
        (257, 90, 130, false, true),
    ];
    for (m, k, n, ta, tb) in cases {
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let a_shape = if ta { vec![k, m] } else { vec![m, k] };
        let b_shape = if tb { vec![n, k] } else { vec![k, n] };
        let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
        let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
        let want: Vec<f64> = (0..m * n)
            .map(|e| (0..k).map(|p| at(e / n, p) * bt(p, e % n)).sum())
            .collect();
        let shapes = [a_shape, b_shape];
        let got = run(&shapes, &[a.clone(), b.clone()], |_, t| {
            t[0].matmul_t(&t[1], ta, tb)
        });
        assert_close(&got.to_f64_vec(), &want, 1e-12);
        let f32_got = run(&shapes, &[a.clone(), b.clone()], |_, t| {
            t[0].cast(DType::F32)
                .matmul_t(&t[1].cast(DType::F32), ta, tb)
                .cast(DType::F64)
        });
        assert_close(&f32_got.to_f64_vec(), &want, 1e-4);
    }
}
