//! One compiled train step: a 3-layer MLP, softmax cross-entropy, reverse
//! pass and AdamW, traced and compiled into ONE program that updates the
//! parameters and both Adam moments in place. Trains on a toy problem
//! (the label is the index of the largest of the first ten features) and
//! prints the program's kernels and the falling loss.
//!
//! `cargo run --release -p nitro-graph --example mlp_train_step`

use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense};
use nitro_graph::nn::train::AdamStep;
use nitro_graph::{Array, GraphError};

fn main() -> Result<(), GraphError> {
    let (batch, features) = (128, 32);
    let model = Chain::new()
        .push(Dense::new(features, 64).with(Activation::Relu))
        .push(Dense::new(64, 64).with(Activation::Relu))
        .push(Dense::new(64, 10));
    let mut step = AdamStep::new(&model, model.init_params(0)?, &[batch, features], 3e-3)?;
    let s = step.program().stats().clone();
    println!(
        "one program: {} nodes, {} kernels ({} fused), {} donated buffers updated in place, peak {} KiB, traced in {:.2} ms, compiled in {:.2} ms",
        s.nodes, s.kernels, s.fused_kernels, s.in_place, s.peak_bytes / 1024, step.trace_ms(), s.compile_ms
    );
    let mut rng = InitRng::new(1);
    for i in 0..=300 {
        let x: Vec<f32> = (0..batch * features).map(|_| rng.normal() as f32).collect();
        let y: Vec<i32> = x
            .chunks(features)
            .map(|row| {
                (0..10)
                    .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                    .expect("ten features") as i32
            })
            .collect();
        let loss = step.step(
            &Array::new(&[batch, features], x)?,
            &Array::new(&[batch], y)?,
        )?;
        if i % 50 == 0 {
            println!("step {i:3}  loss {loss:.4}");
        }
    }
    Ok(())
}
