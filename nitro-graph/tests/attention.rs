//! Attention and the transformer's parts against references written here:
//! multi-head attention by naive loops (causal and key-padding masks),
//! causality as a gradient fact (a later token never moves an earlier
//! output), and a pre-LN transformer block with positional embedding and
//! a tied output projection against textbook formulas, with gradients
//! against finite differences in f64. The other layers are in `models.rs`.
#![allow(clippy::needless_range_loop, clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` reads better in tests

mod common;
mod layer_refs;

use common::{assert_close, check_grad, run, values};
use layer_refs::{gelu_ref, param_shapes, tree};
use nitro_graph::nn::attention::{
    MultiHeadAttention, PositionalEmbedding, TiedProjection, TransformerBlock,
};
use nitro_graph::nn::combinators::Chain;
use nitro_graph::nn::ctx::Ctx;
use nitro_graph::nn::layers::{Embedding, Layer, Params};
use nitro_graph::{compile, Array, CompileOptions, DType, Tensor, TensorSpec};
/// Naive multi-head attention over `[b, t, d]` with the fused `[d, 3d]`
/// projection (q | k | v, heads contiguous) and the output projection.
#[allow(clippy::too_many_arguments)]
fn attention_ref(
    x: &[f64],
    (b, t, d, h): (usize, usize, usize, usize),
    p: &Params<Vec<f64>>,
    prefix: &str,
    causal: bool,
    mask: Option<&[bool]>,
) -> Vec<f64> {
    let g = |n: &str| &p[&format!("{prefix}{n}")];
    let dense = |x: &[f64], w: &[f64], bias: &[f64], i: usize, o: usize| -> Vec<f64> {
        let rows = x.len() / i;
        (0..rows * o)
            .map(|e| {
                (0..i)
                    .map(|k| x[(e / o) * i + k] * w[k * o + e % o])
                    .sum::<f64>()
                    + bias[e % o]
            })
            .collect()
    };
    let qkv = dense(x, g("qkv.weight"), g("qkv.bias"), d, 3 * d);
    let hd = d / h;
    let mut y = vec![0.0; b * t * d];
    for bb in 0..b {
        for hh in 0..h {
            for i in 0..t {
                let q = |c: usize| qkv[(bb * t + i) * 3 * d + hh * hd + c];
                let allowed: Vec<bool> = (0..t)
                    .map(|j| (!causal || j <= i) && mask.is_none_or(|m| m[bb * t + j]))
                    .collect();
                let scores: Vec<f64> = (0..t)
                    .map(|j| {
                        (0..hd)
                            .map(|c| q(c) * qkv[(bb * t + j) * 3 * d + d + hh * hd + c])
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = (0..t)
                    .filter(|&j| allowed[j])
                    .map(|j| scores[j])
                    .fold(f64::MIN, f64::max);
                let e: Vec<f64> = (0..t)
                    .map(|j| {
                        if allowed[j] {
                            (scores[j] - m).exp()
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let z: f64 = e.iter().sum();
                for c in 0..hd {
                    y[(bb * t + i) * d + hh * hd + c] = (0..t)
                        .map(|j| e[j] / z * qkv[(bb * t + j) * 3 * d + 2 * d + hh * hd + c])
                        .sum();
                }
            }
        }
    }
    dense(&y, g("out.weight"), g("out.bias"), d, d)
}

fn layer_norm_ref(x: &[f64], d: usize, g: &[f64], s: &[f64]) -> Vec<f64> {
    x.chunks(d)
        .flat_map(|row| {
            let mu = row.iter().sum::<f64>() / d as f64;
            let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / d as f64;
            (0..d).map(move |c| (row[c] - mu) / (var + 1e-5).sqrt() * g[c] + s[c])
        })
        .collect()
}

/// Data for every parameter of `shapes` (seeded by position), as a tree.
fn param_data(shapes: &[(String, Vec<usize>)], seed: u64) -> Params<Vec<f64>> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, (n, s))| (n.clone(), values(s.iter().product(), seed + i as u64)))
        .collect()
}

#[test]
fn attention_matches_the_naive_loops_with_both_masks() {
    let (b, t, d, h) = (2, 4, 6, 3);
    let x = values(b * t * d, 40);
    let mask: Vec<bool> = vec![true, true, true, false, true, true, false, false];
    for causal in [false, true] {
        for with_mask in [false, true] {
            let mut mha = MultiHeadAttention::new(d, h);
            mha.causal = causal;
            let shapes = param_shapes(&mha);
            let p = param_data(&shapes, 50);
            let mut all_shapes = vec![vec![b, t, d], vec![b, t]];
            let mut data = vec![x.clone(), mask.iter().map(|&m| m as u8 as f64).collect()];
            all_shapes.extend(shapes.iter().map(|s| s.1.clone()));
            data.extend(shapes.iter().map(|s| p[&s.0].clone()));
            let got = run(&all_shapes, &data, |_, tt| {
                let m = with_mask.then(|| tt[1].clone());
                mha.attend(
                    &Ctx::eval(),
                    &tree(&shapes, &tt[2..]),
                    "",
                    &tt[0],
                    m.as_ref(),
                )
            });
            let want = attention_ref(
                &x,
                (b, t, d, h),
                &p,
                "",
                causal,
                with_mask.then_some(&mask[..]),
            );
            assert_close(&got.to_f64_vec(), &want, 1e-10);
            let (m2, s2) = (mha.clone(), shapes.clone());
            check_grad(&all_shapes, 60, move |_, tt| {
                let m = with_mask.then(|| tt[1].clone());
                m2.attend(&Ctx::eval(), &tree(&s2, &tt[2..]), "", &tt[0], m.as_ref())
            });
        }
    }
}

/// The gradient of `sum(out[:, i, :] * r)` with respect to every input
/// position, from one compiled program.
fn position_grads(
    layer: &(impl Fn(&Tensor, &Params<Tensor>) -> Tensor + ?Sized),
    shapes: &[(String, Vec<usize>)],
    (b, t, d): (usize, usize, usize),
    i: usize,
) -> Vec<f64> {
    let mut specs = vec![("x".to_string(), TensorSpec::new(DType::F64, &[b, t, d]))];
    specs.extend(
        shapes
            .iter()
            .map(|(n, s)| (n.clone(), TensorSpec::new(DType::F64, s))),
    );
    let refs: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let program = compile(&refs, CompileOptions::named("causal"), |tr, tt| {
        let y = layer(&tt[0], &tree(shapes, &tt[1..]));
        let r = tr.literal(&values(b * d, 77), &[b, 1, d], DType::F64);
        let loss = (y.narrow(1, i, i + 1) * r).sum_all();
        let g = tr.grad(&loss, &[&tt[0]])?;
        Ok(vec![("g".into(), g[0].clone())])
    })
    .unwrap();
    let mut args = vec![Array::new(&[b, t, d], values(b * t * d, 78)).unwrap()];
    args.extend(
        shapes
            .iter()
            .enumerate()
            .map(|(k, (_, s))| Array::new(s, values(s.iter().product(), 90 + k as u64)).unwrap()),
    );
    program.run(&mut args).unwrap().remove(0).to_f64_vec()
}

#[test]
fn a_later_token_never_changes_an_earlier_output() {
    let (b, t, d) = (2, 5, 8);
    let block = TransformerBlock::new(d, 2).causal();
    let shapes = param_shapes(&block);
    let f = |x: &Tensor, ps: &Params<Tensor>| {
        block.forward(&Ctx::eval(), ps, &mut Params::new(), "", x)
    };
    for i in 0..t {
        let g = position_grads(&f, &shapes, (b, t, d), i);
        for bb in 0..b {
            for j in 0..t {
                let n: f64 = (0..d).map(|c| g[(bb * t + j) * d + c].abs()).sum();
                if j > i {
                    assert_eq!(n, 0.0, "output {i} depends on later token {j}");
                } else if j == i {
                    assert!(n > 0.0, "output {i} depends on its own token");
                }
            }
        }
    }
    // A padded key never changes a real token's output either.
    let mha = MultiHeadAttention::new(d, 2);
    let shapes = param_shapes(&mha);
    let mask = [1.0, 1.0, 1.0, 0.0, 0.0];
    let f = |x: &Tensor, ps: &Params<Tensor>| {
        let m = x
            .tracer()
            .literal(&[mask, mask].concat(), &[b, t], DType::F64);
        mha.attend(&Ctx::eval(), ps, "", x, Some(&m))
    };
    for i in 0..3 {
        let g = position_grads(&f, &shapes, (b, t, d), i);
        for j in 3..t {
            assert!(
                (0..d).all(|c| g[j * d + c] == 0.0),
                "real token {i} sees padded key {j}"
            );
        }
    }
}

#[test]
fn transformer_block_positional_embedding_and_tying_match_references() {
    let (b, t, d, h) = (2, 3, 4, 2);
    let block = TransformerBlock::new(d, h).causal();
    let shapes = param_shapes(&block);
    let names: Vec<&str> = shapes.iter().map(|s| s.0.as_str()).collect();
    assert!(
        names.contains(&"attn.qkv.weight")
            && names.contains(&"fc.weight")
            && names.contains(&"ln2.scale")
    );
    let p = param_data(&shapes, 100);
    let x = values(b * t * d, 99);
    let mut all = vec![vec![b, t, d]];
    all.extend(shapes.iter().map(|s| s.1.clone()));
    let mut data = vec![x.clone()];
    data.extend(shapes.iter().map(|s| p[&s.0].clone()));
    let got = run(&all, &data, |_, tt| {
        block.apply(&tree(&shapes, &tt[1..]), "", &tt[0])
    });
    let ln1 = layer_norm_ref(&x, d, &p["ln1.scale"], &p["ln1.shift"]);
    let a = attention_ref(&ln1, (b, t, d, h), &p, "attn.", true, None);
    let x1: Vec<f64> = x.iter().zip(&a).map(|(u, v)| u + v).collect();
    let ln2 = layer_norm_ref(&x1, d, &p["ln2.scale"], &p["ln2.shift"]);
    let hidden = 4 * d;
    let fc: Vec<f64> = (0..b * t * hidden)
        .map(|e| {
            let (r, c) = (e / hidden, e % hidden);
            gelu_ref(
                (0..d)
                    .map(|k| ln2[r * d + k] * p["fc.weight"][k * hidden + c])
                    .sum::<f64>()
                    + p["fc.bias"][c],
            )
        })
        .collect();
    let want: Vec<f64> = (0..b * t * d)
        .map(|e| {
            let (r, c) = (e / d, e % d);
            x1[e]
                + (0..hidden)
                    .map(|k| fc[r * hidden + k] * p["proj.weight"][k * d + c])
                    .sum::<f64>()
                + p["proj.bias"][c]
        })
        .collect();
    // f64 programs get libm's erf: as exact as the reference.
    assert_close(&got.to_f64_vec(), &want, 1e-10);
    check_grad(&all, 101, |_, tt| {
        block.apply(&tree(&shapes, &tt[1..]), "", &tt[0])
    });

    // Token + position embeddings and a tied output projection.
    let (vocab, context) = (5, 4);
    let model = Chain::new()
        .push(Embedding { vocab, dim: d })
        .push(PositionalEmbedding { context, dim: d })
        .push(TiedProjection {
            embedding: "0".into(),
            vocab,
            dim: d,
        });
    let shapes = param_shapes(&model);
    assert_eq!(
        shapes.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        ["0.table", "1.table"]
    );
    let p = param_data(&shapes, 200);
    let ids = [4usize, 0, 2, 1, 1, 3];
    let got = run(
        &[vec![vocab, d], vec![context, d]],
        &[p["0.table"].clone(), p["1.table"].clone()],
        |tr, tt| {
            let idx = tr.literal(&ids.map(|i| i as f64), &[b, t], DType::I32);
            model.apply(&tree(&shapes, tt), "", &idx)
        },
    );
    let mut want = vec![];
    for (pos, &id) in ids.iter().enumerate() {
        let e: Vec<f64> = (0..d)
            .map(|c| p["0.table"][id * d + c] + p["1.table"][(pos % t) * d + c])
            .collect();
        want.extend(
            (0..vocab).map(|v| (0..d).map(|c| e[c] * p["0.table"][v * d + c]).sum::<f64>()),
        );
    }
    assert_close(&got.to_f64_vec(), &want, 1e-12);
    check_grad(&[vec![vocab, d], vec![context, d]], 201, |tr, tt| {
        let idx = tr.literal(&ids.map(|i| i as f64), &[b, t], DType::I32);
        model.apply(&tree(&shapes, tt), "", &idx)
    });
}
