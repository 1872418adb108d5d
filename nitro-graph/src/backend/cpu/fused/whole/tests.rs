//! The whole-group loops (`whole`) compute bit for bit what the chunk loop
//! computes for the same group: f32 and f64, over awkward values (±0, NaN,
//! ±inf, negative second moments), lengths that are not a multiple of the
//! block, one over the parallel task size, and outputs written over their
//! inputs as the memory plan arranges for a donated update. The Adam update
//! with and without the guard (both flag values); bias + ReLU with any of
//! its three results stored, rows not a multiple of the block. A group that
//! differs from a template in one step is left to the chunk loop.

use crate::backend::cpu::fused::FusedKernel;
use crate::backend::cpu::raw::Raw;
use crate::fusion::{schedule, Kernel, Rules};
use crate::ir::{Graph, TensorSpec};
use crate::trace::{trace, Tensor};
use nitro_device::{DType, HostBuffer};

/// The update as `nn::optim::adam` traces it once its bias corrections are
/// scalars (here inputs 4..12: the template's S0..S7): g, m, v, p at 0..4.
fn update(t: &[Tensor], guard: Option<&Tensor>, extra_step: bool) -> Vec<(String, Tensor)> {
    let (g, m, v, p) = (&t[0], &t[1], &t[2], &t[3]);
    let s = &t[4..12];
    let g = if extra_step { g * &s[0] } else { g.clone() };
    let m_new = &s[1] * m + &s[0] * &g;
    let v_new = &s[3] * v + &s[2] * &g * &g;
    let denom = v_new.sqrt() * &s[4] + &s[5];
    let p_new = p * &s[7] - (&m_new / &denom) * &s[6];
    let outs = match guard {
        // As nitro-run's `keep_if`.
        Some(ok) => {
            let ok = ok.broadcast_to(p.shape());
            [
                ok.select(&p_new, p),
                ok.select(&m_new, m),
                ok.select(&v_new, v),
            ]
        }
        None => [p_new, m_new, v_new],
    };
    ["p", "m", "v"]
        .into_iter()
        .zip(outs)
        .map(|(n, t)| (n.to_string(), t))
        .collect()
}

fn adam_graph(d: DType, n: usize, guarded: bool, extra_step: bool) -> Graph {
    let mut specs: Vec<(String, TensorSpec)> = ["g", "m", "v", "p"]
        .iter()
        .map(|s| (s.to_string(), TensorSpec::new(d, &[n])))
        .collect();
    specs.extend((0..8).map(|i| (format!("s{i}"), TensorSpec::new(d, &[]))));
    specs.push(("ok".into(), TensorSpec::new(DType::Bool, &[])));
    let refs: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(s, t)| (s.as_str(), t.clone())).collect();
    trace(&refs, |_, t| {
        Ok(update(t, guarded.then_some(&t[12]), extra_step))
    })
    .expect("traces")
}

/// Awkward stream values: every 13th one of ±0, NaN, ±inf, a negative.
fn stream(seed: u64, n: usize) -> Vec<f64> {
    let special = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.75];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match i % 13 {
                0 => special[(i / 13) % special.len()],
                _ => (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 0.5,
            }
        })
        .collect()
}

fn buffer(d: DType, v: &[f64]) -> HostBuffer {
    match d {
        DType::F32 => HostBuffer::F32(v.iter().map(|&x| x as f32).collect()),
        _ => HostBuffer::F64(v.to_vec()),
    }
}

/// The only fused kernel of `graph` over `inputs`, run by the chunk loop
/// and by `FusedKernel::run` (the whole-group loop where recognised), the
/// outputs written over the inputs `in_place` names (one per output), if
/// any. Returns (chunk-loop bytes, run bytes, recognised name).
fn both(
    graph: &Graph,
    inputs: &[HostBuffer],
    in_place: Option<&[usize]>,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, Option<&'static str>) {
    let kernels: Vec<FusedKernel> = schedule(graph, Rules::default())
        .kernels
        .into_iter()
        .filter_map(|k| match k {
            Kernel::Fused(g) => Some(FusedKernel::new(graph, &g)),
            _ => None,
        })
        .collect();
    assert_eq!(kernels.len(), 1, "one fused group");
    let k = &kernels[0];
    let name = k.whole.as_ref().map(|w| w.name());
    let go = |run: &dyn Fn(&[Raw], &[Raw])| -> Vec<Vec<u8>> {
        let mut bufs: Vec<HostBuffer> = inputs.to_vec();
        let mut outs: Vec<HostBuffer> = k
            .outputs
            .iter()
            .map(|&o| HostBuffer::zeros(graph.nodes[o].spec.dtype, graph.nodes[o].spec.numel()))
            .collect();
        let input_of = |n: crate::ir::NodeId| match graph.nodes[n].op {
            crate::ir::Op::Input { index } => index,
            ref other => panic!("kernel reads {}: not an input", other.name()),
        };
        let raws: Vec<Raw> = bufs.iter_mut().map(Raw::of).collect();
        let ins: Vec<Raw> = k.inputs.iter().map(|&n| raws[input_of(n)]).collect();
        let out_raws: Vec<Raw> = match in_place {
            Some(over) => over.iter().map(|&i| raws[i]).collect(),
            None => outs.iter_mut().map(Raw::of).collect(),
        };
        run(&ins, &out_raws);
        match in_place {
            Some(over) => over.iter().map(|&i| bufs[i].to_le_bytes()).collect(),
            None => outs.iter().map(|b| b.to_le_bytes()).collect(),
        }
    };
    let base = go(&|i, o| k.run_baseline(i, o));
    let run = go(&|i, o| k.run(i, o));
    (base, run, name)
}

fn inputs(d: DType, n: usize, ok: bool) -> Vec<HostBuffer> {
    let mut bufs: Vec<HostBuffer> = (0..4).map(|i| buffer(d, &stream(i + 1, n))).collect();
    // 1-b1, b1, 1-b2, b2, 1/sqrt(bc2), eps, lr/bc1, 1-lr*wd: odd values,
    // so no product is exact by accident.
    let scalars = [
        0.1,
        0.9,
        0.001,
        0.999,
        1.0 / 0.0173f64.sqrt(),
        1e-8,
        3e-3 / 0.19,
        1.0 - 3e-5,
    ];
    bufs.extend(scalars.iter().map(|&s| buffer(d, &[s])));
    bufs.push(HostBuffer::Bool(vec![ok]));
    bufs
}

#[test]
fn the_whole_group_adam_loop_equals_the_chunk_loop_bit_for_bit() {
    for d in [DType::F32, DType::F64] {
        // Under one block, a remainder past blocks and chunks, and more
        // than one parallel task.
        for n in [7, 1000, 40_003] {
            for (guarded, ok) in [(false, true), (true, true), (true, false)] {
                let graph = adam_graph(d, n, guarded, false);
                // In place: p, m, v (the outputs' order) over inputs 3, 1, 2.
                for in_place in [None, Some(&[3, 1, 2][..])] {
                    let (base, run, name) = both(&graph, &inputs(d, n, ok), in_place);
                    let want = if guarded { "adam+guard" } else { "adam" };
                    assert_eq!(name, Some(want), "{d} n={n}: the group is the template");
                    for (k, (b, r)) in base.iter().zip(&run).enumerate() {
                        assert!(
                            b == r,
                            "{d} n={n} guarded={guarded} ok={ok} in_place={in_place:?}: output {k} differs"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_group_that_differs_from_the_template_runs_on_the_chunk_loop() {
    // A gradient scale fused into the group (as clipping would) is one
    // step more than the template: not recognised, and still computed.
    let graph = adam_graph(DType::F32, 1000, true, true);
    let (base, run, name) = both(&graph, &inputs(DType::F32, 1000, true), None);
    assert_eq!(name, None);
    assert!(base == run);
}

/// `relu(x + bias)` over `[rows, cols]` as `nn::ops::relu` traces it; the
/// outputs are those `keep` names of (sum, mask, relu).
fn bias_relu_graph(d: DType, rows: usize, cols: usize, keep: [bool; 3]) -> Graph {
    let specs = [
        ("x", TensorSpec::new(d, &[rows, cols])),
        ("b", TensorSpec::new(d, &[cols])),
    ];
    trace(&specs, |_, t| {
        let sum = &t[0] + &t[1].reshape(&[1, cols]);
        let zero = sum.scalar_like(0.0);
        let mask = sum.gt(&zero);
        let relu = mask.select(&sum, &zero);
        Ok(["sum", "mask", "relu"]
            .into_iter()
            .zip([sum, mask, relu])
            .zip(keep)
            .filter(|(_, k)| *k)
            .map(|((n, t), _)| (n.to_string(), t))
            .collect())
    })
    .expect("traces")
}

#[test]
fn the_whole_group_bias_relu_loop_equals_the_chunk_loop_bit_for_bit() {
    for d in [DType::F32, DType::F64] {
        // Rows shorter than a block, not a multiple of it, and a product
        // over the parallel task size.
        for (rows, cols) in [(3, 5), (37, 21), (300, 512)] {
            let keeps = [
                [false, false, true],
                [false, true, true],
                [true, true, true],
                [true, false, false],
            ];
            for keep in keeps {
                let graph = bias_relu_graph(d, rows, cols, keep);
                let x = buffer(d, &stream(7, rows * cols));
                let b = buffer(d, &stream(8, cols));
                // The ReLU alone may be written over the product, as an
                // epilogue over its dying matmul is.
                let over: Option<&[usize]> = (keep == [false, false, true]).then_some(&[0]);
                for in_place in [None, over]
                    .into_iter()
                    .collect::<std::collections::HashSet<_>>()
                {
                    let (base, run, name) = both(&graph, &[x.clone(), b.clone()], in_place);
                    assert_eq!(name, Some("bias+relu"), "{d} {rows}x{cols} {keep:?}");
                    for (k, (bb, r)) in base.iter().zip(&run).enumerate() {
                        assert!(
                            bb == r,
                            "{d} {rows}x{cols} {keep:?} in_place={in_place:?}: output {k} differs"
                        );
                    }
                }
            }
        }
    }
}
