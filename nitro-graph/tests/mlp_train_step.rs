//! The MLP train step (forward, softmax cross-entropy, backward, Adam on
//! every parameter) compiles into ONE program that updates params and Adam
//! moments in place, and matches a naive reference written here with plain
//! loops (loss, every gradient, every parameter after 3 steps).
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[shape.clone()]` reads better in tests

use nitro_graph::{Array, DType, Program, TensorSpec};

mod mlp_shared;

use mlp_shared::{param_names, values, BATCH, SIZES};

fn build(dtype: DType) -> Program {
    let (graph, options) = mlp_shared::mlp_train_step(dtype).expect("the train step traces");
    nitro_graph::compile_graph(graph, options).expect("the train step compiles")
}

/// Naive reference: plain f64 loops, written independently of nitro.
struct Reference {
    w: Vec<Vec<f64>>,
    b: Vec<Vec<f64>>,
    m: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

impl Reference {
    /// Returns (loss, grads [w0, b0, w1, b1, w2, b2]) and applies Adam.
    fn step(&mut self, x: &[f64], y: &[i32], t: f64) -> (f64, Vec<Vec<f64>>) {
        let (lr, b1, b2, eps) = (0.01, 0.9, 0.999, 1e-8);
        // forward
        let mut acts = vec![x.to_vec()];
        let mut pre = vec![];
        for l in 0..3 {
            let (i_n, o_n) = (SIZES[l], SIZES[l + 1]);
            let a = &acts[l];
            let mut z = vec![0.0; BATCH * o_n];
            for n in 0..BATCH {
                for o in 0..o_n {
                    let mut s = self.b[l][o];
                    for i in 0..i_n {
                        s += a[n * i_n + i] * self.w[l][i * o_n + o];
                    }
                    z[n * o_n + o] = s;
                }
            }
            let next = if l < 2 {
                z.iter().map(|&v| v.max(0.0)).collect()
            } else {
                z.clone()
            };
            pre.push(z);
            acts.push(next);
        }
        let c = SIZES[3];
        let logits = &acts[3];
        let mut loss = 0.0;
        let mut dz = vec![0.0; BATCH * c];
        for n in 0..BATCH {
            let row = &logits[n * c..(n + 1) * c];
            let mx = row.iter().cloned().fold(f64::MIN, f64::max);
            let se: f64 = row.iter().map(|v| (v - mx).exp()).sum();
            for k in 0..c {
                let p = (row[k] - mx).exp() / se;
                let target = (k as i32 == y[n]) as u8 as f64;
                dz[n * c + k] = (p - target) / BATCH as f64;
            }
            loss -= (row[y[n] as usize] - mx) - se.ln();
        }
        loss /= BATCH as f64;
        // backward
        let mut grads = vec![vec![]; 6];
        for l in (0..3).rev() {
            let (i_n, o_n) = (SIZES[l], SIZES[l + 1]);
            let a = &acts[l];
            let mut gw = vec![0.0; i_n * o_n];
            let mut gb = vec![0.0; o_n];
            let mut da = vec![0.0; BATCH * i_n];
            for n in 0..BATCH {
                for o in 0..o_n {
                    let d = dz[n * o_n + o];
                    gb[o] += d;
                    for i in 0..i_n {
                        gw[i * o_n + o] += a[n * i_n + i] * d;
                        da[n * i_n + i] += self.w[l][i * o_n + o] * d;
                    }
                }
            }
            if l > 0 {
                dz = da
                    .iter()
                    .zip(&pre[l - 1])
                    .map(|(&g, &z)| if z > 0.0 { g } else { 0.0 })
                    .collect();
            }
            grads[2 * l] = gw;
            grads[2 * l + 1] = gb;
        }
        // Adam
        for (k, g) in grads.iter().enumerate() {
            let p = if k % 2 == 0 {
                &mut self.w[k / 2]
            } else {
                &mut self.b[k / 2]
            };
            for j in 0..g.len() {
                self.m[k][j] = b1 * self.m[k][j] + (1.0 - b1) * g[j];
                self.v[k][j] = b2 * self.v[k][j] + (1.0 - b2) * g[j] * g[j];
                let mh = self.m[k][j] / (1.0 - f64::powf(b1, t));
                let vh = self.v[k][j] / (1.0 - f64::powf(b2, t));
                p[j] -= lr * mh / (vh.sqrt() + eps);
            }
        }
        (loss, grads)
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * (1.0 + b.abs())
}

fn run_against_reference(dtype: DType, rel: f64) {
    let program = build(dtype);
    let params = param_names();
    let to = |shape: &[usize], v: &[f64]| Array::new(shape, v.to_vec()).unwrap().cast(dtype);
    let init: Vec<Vec<f64>> = params
        .iter()
        .enumerate()
        .map(|(i, (_, s))| values(s.iter().product(), i as u64, 0.6))
        .collect();
    let mut reference = Reference {
        w: (0..3).map(|l| init[2 * l].clone()).collect(),
        b: (0..3).map(|l| init[2 * l + 1].clone()).collect(),
        m: params
            .iter()
            .map(|(_, s)| vec![0.0; s.iter().product()])
            .collect(),
        v: params
            .iter()
            .map(|(_, s)| vec![0.0; s.iter().product()])
            .collect(),
    };
    let mut args: Vec<Array> = vec![];
    for (i, (_, s)) in params.iter().enumerate() {
        args.push(to(s, &init[i]));
    }
    for _ in 0..2 {
        for (_, s) in &params {
            args.push(Array::zeros(&TensorSpec::new(dtype, s)));
        }
    }
    let x = values(BATCH * SIZES[0], 99, 1.0);
    let y: Vec<i32> = vec![0, 3, 1, 2, 3];
    args.push(to(&[BATCH, SIZES[0]], &x));
    args.push(Array::new(&[BATCH], y.clone()).unwrap());
    for h in [0.01, 0.9, 0.999, 1e-8, 0.0] {
        args.push(to(&[], &[h]));
    }
    let np = params.len();
    let t_index = args.len() - 1;
    for step in 1..=3 {
        args[t_index] = to(&[], &[step as f64]);
        let out = program.run(&mut args).unwrap();
        let (loss, grads) = reference.step(&x, &y, step as f64);
        assert!(
            close(out[0].item().unwrap(), loss, rel),
            "step {step} loss {} vs {loss}",
            out[0].item().unwrap()
        );
        for (k, g) in grads.iter().enumerate() {
            for (a, b) in out[1 + k].to_f64_vec().iter().zip(g) {
                assert!(
                    close(*a, *b, rel),
                    "step {step} grad {} {a} vs {b}",
                    params[k].0
                );
            }
        }
        for k in 0..np {
            let want = if k % 2 == 0 {
                &reference.w[k / 2]
            } else {
                &reference.b[k / 2]
            };
            for (a, b) in args[k].to_f64_vec().iter().zip(want) {
                assert!(
                    close(*a, *b, rel),
                    "step {step} param {} {a} vs {b}",
                    params[k].0
                );
            }
        }
    }
}

#[test]
fn matches_reference_in_f64() {
    run_against_reference(DType::F64, 1e-10);
}

#[test]
fn matches_reference_in_f32() {
    run_against_reference(DType::F32, 1e-5);
}

#[test]
fn is_one_program_updating_params_and_moments_in_place() {
    let program = build(DType::F32);
    // Only the loss and the gradients come back; every param, m and v is donated.
    assert_eq!(
        program.returned_names().len(),
        1 + 6,
        "{:?}",
        program.returned_names()
    );
    assert_eq!(
        program.stats().in_place,
        18,
        "all 18 updates written in place:\n{}",
        program.listing()
    );
    // 3 forward matmuls, 5 backward, reductions, and ONE fused kernel per
    // parameter for its whole Adam update (p, m and v together).
    assert!(program.kernel_count() <= 40, "{}", program.listing());
    // Each update, and each hidden layer's bias + ReLU, runs as one
    // register-resident loop, not an instruction per pass (the loops equal
    // the chunk loop bit for bit: the fused tests; the reference tests
    // above check both against f64 loops).
    let listing = program.listing();
    assert_eq!(listing.matches(" as adam]").count(), 6, "{listing}");
    assert_eq!(listing.matches(" as bias+relu]").count(), 2, "{listing}");
}
