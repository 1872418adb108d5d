//! The zoo's GPT ([`zoo::gpt`]) and the typed-input Adam step
//! ([`AdamStep::with_specs`]): logits' shape, causality of the whole model,
//! that it learns a sequence a bigram model cannot predict, and that its
//! init draws from the distributions of `peers/gpt_step.py`.

use nitro_graph::nn::train::AdamStep;
use nitro_graph::nn::zoo::{self, GptConfig};
use nitro_graph::nn::{Layer, Params};
use nitro_graph::{compile, Array, CompileOptions, DType, TensorSpec};

fn tiny() -> GptConfig {
    GptConfig {
        vocab: 8,
        context: 8,
        dim: 16,
        heads: 2,
        layers: 1,
        dropout: 0.0,
    }
}

fn logits(c: &GptConfig, ids: &Array) -> Vec<f32> {
    let model = zoo::gpt(c);
    let params = model.init_params(1).unwrap();
    let names: Vec<String> = params.keys().cloned().collect();
    let mut specs: Vec<(&str, TensorSpec)> = names
        .iter()
        .map(|n| (n.as_str(), params[n].spec().clone()))
        .collect();
    specs.push(("ids", ids.spec().clone()));
    let program = compile(&specs, CompileOptions::named("gpt_logits"), |_, t| {
        let p: Params<nitro_graph::Tensor> = names.iter().cloned().zip(t.iter().cloned()).collect();
        Ok(vec![(
            "logits".into(),
            model.apply(&p, "", &t[names.len()]),
        )])
    })
    .unwrap();
    let mut args: Vec<Array> = names.iter().map(|n| params[n].clone()).collect();
    args.push(ids.clone());
    let out = program.run(&mut args).unwrap();
    assert_eq!(out[0].shape(), &[ids.shape()[0], ids.shape()[1], c.vocab]);
    out[0].as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn a_later_token_never_changes_an_earlier_logit() {
    let c = tiny();
    let a = Array::new(&[1, 8], vec![1i32, 2, 3, 4, 5, 6, 7, 0]).unwrap();
    let b = Array::new(&[1, 8], vec![1i32, 2, 3, 4, 0, 0, 1, 1]).unwrap();
    let (la, lb) = (logits(&c, &a), logits(&c, &b));
    let v = c.vocab;
    assert_eq!(
        la[..4 * v],
        lb[..4 * v],
        "positions 0..4 see the same prefix"
    );
    assert_ne!(
        la[4 * v..5 * v],
        lb[4 * v..5 * v],
        "position 4 sees its own token"
    );
}

#[test]
fn gpt_learns_a_sequence_that_needs_context() {
    // next = a[i-1] + a[i-2] (mod 8): the previous token alone does not
    // determine it, so a loss near 0 needs attention over two positions.
    let c = tiny();
    let model = zoo::gpt(&c);
    let spec = TensorSpec::new(DType::I32, &[4, c.context]);
    let mut step =
        AdamStep::with_specs(&model, model.init_params(0).unwrap(), &spec, &spec, 1e-2).unwrap();
    let rows: Vec<Vec<i32>> = (0..4)
        .map(|r| {
            let mut s = vec![r, (r * 3 + 1) % 8];
            while s.len() < c.context + 1 {
                let n = s.len();
                s.push((s[n - 1] + s[n - 2]) % 8);
            }
            s
        })
        .collect();
    let x: Vec<i32> = rows.iter().flat_map(|r| r[..8].to_vec()).collect();
    let y: Vec<i32> = rows.iter().flat_map(|r| r[1..].to_vec()).collect();
    let (x, y) = (
        Array::new(&[4, 8], x).unwrap(),
        Array::new(&[4, 8], y).unwrap(),
    );
    let first = step.step(&x, &y).unwrap();
    assert!(
        (first - (8f32).ln()).abs() < 1.0,
        "starts near ln 8: {first}"
    );
    let mut last = first;
    for _ in 0..150 {
        last = step.step(&x, &y).unwrap();
    }
    assert!(last < 0.3, "loss {first} -> {last}");
}

/// The zoo's GPT starts from `peers/gpt_step.py`'s distributions: tables
/// normal with std 0.02, projections uniform within ±1/√fan_in (std
/// bound/√3), biases and LayerNorm shifts zero, scales one, no output bias.
#[test]
fn gpt_init_follows_the_peer_script() {
    let c = GptConfig::bench();
    let params = zoo::gpt(&c).init_params(7).unwrap();
    let stats = |v: &[f64]| {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        (
            mean,
            var.sqrt(),
            v.iter().fold(0.0f64, |m, x| m.max(x.abs())),
        )
    };
    let (mut tables, mut weights) = (0, 0);
    for (name, a) in &params {
        let v = a.to_f64_vec();
        let (mean, std, max) = stats(&v);
        let shape = a.shape();
        if name.ends_with("weight") {
            let bound = 1.0 / (shape[0] as f64).sqrt();
            assert!(max <= bound, "{name}: |w| {max} > 1/sqrt({})", shape[0]);
            let want = bound / 3f64.sqrt();
            assert!(
                (std / want - 1.0).abs() < 0.05,
                "{name}: std {std}, want {want}"
            );
            weights += 1;
        } else if shape.len() == 2 {
            assert!(
                (std / 0.02 - 1.0).abs() < 0.05 && mean.abs() < 2e-3,
                "{name}: std {std}"
            );
            tables += 1;
        } else {
            let one = name.ends_with("scale");
            assert!(
                v.iter().all(|&x| x == if one { 1.0 } else { 0.0 }),
                "{name}"
            );
        }
    }
    // qkv, out, fc, proj per block and the output projection; wte, wpe.
    assert_eq!((weights, tables), (4 * c.layers + 1, 2));
    let out = c.layers + 3;
    assert!(params.contains_key(&format!("{out}.weight")));
    assert!(
        !params.contains_key(&format!("{out}.bias")),
        "the output projection has no bias"
    );
}
