//! A tiny self-contained trainer (ndarray, minibatch SGD with momentum) for
//! calibrating the digits dataset: softmax regression and a one-hidden-layer
//! ReLU MLP with softmax cross-entropy.
#![allow(dead_code)]

use ndarray::{Array1, Array2, Axis};
use nitro_data::{Dataset, InMemory};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Flattened images `[n, 784]` and labels.
pub fn xy(data: &InMemory) -> (Array2<f32>, Vec<usize>) {
    let f = data.as_fields();
    let img = f
        .get("image")
        .and_then(|a| a.as_slice::<f32>())
        .expect("f32 image");
    let n = data.len();
    let x = Array2::from_shape_vec((n, img.len() / n.max(1)), img.to_vec()).expect("[n, 784]");
    let y = f
        .get("label")
        .and_then(|a| a.as_slice::<i32>())
        .expect("i32 label");
    (x, y.iter().map(|&v| v as usize).collect())
}

fn softmax_rows(z: &mut Array2<f32>) {
    for mut row in z.rows_mut() {
        let m = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        row.mapv_inplace(|v| (v - m).exp());
        let s = row.sum();
        row /= s;
    }
}

/// A dense layer with momentum buffers.
struct Dense {
    w: Array2<f32>,
    b: Array1<f32>,
    vw: Array2<f32>,
    vb: Array1<f32>,
}

impl Dense {
    fn new(i: usize, o: usize, rng: &mut ChaCha8Rng) -> Self {
        let sd = (2.0 / i as f32).sqrt();
        let w = Array2::from_shape_fn((i, o), |_| {
            // Irwin-Hall approximation of a normal: good enough for init.
            let u: f32 = (0..12).map(|_| rng.gen::<f32>()).sum::<f32>() - 6.0;
            u * sd
        });
        Self {
            vw: Array2::zeros((i, o)),
            vb: Array1::zeros(o),
            w,
            b: Array1::zeros(o),
        }
    }
    fn forward(&self, x: &Array2<f32>) -> Array2<f32> {
        x.dot(&self.w) + &self.b
    }
    fn step(&mut self, x: &Array2<f32>, g: &Array2<f32>, lr: f32, mom: f32) {
        let gw = x.t().dot(g);
        let gb = g.sum_axis(Axis(0));
        self.vw = &self.vw * mom + &gw;
        self.vb = &self.vb * mom + &gb;
        self.w.scaled_add(-lr, &self.vw);
        self.b.scaled_add(-lr, &self.vb);
    }
}

/// A model: `hidden` 0 is softmax regression, otherwise a ReLU MLP.
pub struct Model {
    layers: Vec<Dense>,
}

impl Model {
    pub fn new(inputs: usize, hidden: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let layers = if hidden == 0 {
            vec![Dense::new(inputs, 10, &mut rng)]
        } else {
            vec![
                Dense::new(inputs, hidden, &mut rng),
                Dense::new(hidden, 10, &mut rng),
            ]
        };
        Self { layers }
    }

    /// Logits and the hidden activations.
    fn run(&self, x: &Array2<f32>) -> (Array2<f32>, Option<Array2<f32>>) {
        match self.layers.as_slice() {
            [l] => (l.forward(x), None),
            [l1, l2] => {
                let h = l1.forward(x).mapv(|v| v.max(0.0));
                (l2.forward(&h), Some(h))
            }
            _ => unreachable!(),
        }
    }

    /// Class predictions.
    pub fn predict(&self, x: &Array2<f32>) -> Vec<usize> {
        let (z, _) = self.run(x);
        z.rows()
            .into_iter()
            .map(|r| {
                r.iter()
                    .enumerate()
                    .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                    .0
            })
            .collect()
    }

    /// One SGD step on a minibatch with per-row weights (padding gets 0).
    pub fn step(&mut self, x: &Array2<f32>, y: &[usize], weight: &[f32], lr: f32, mom: f32) {
        let (mut p, h) = self.run(x);
        softmax_rows(&mut p);
        let total: f32 = weight.iter().sum::<f32>().max(1.0);
        for (i, (&c, &w)) in y.iter().zip(weight).enumerate() {
            p[[i, c]] -= 1.0;
            p.row_mut(i).mapv_inplace(|v| v * w / total);
        }
        match h {
            None => self.layers[0].step(x, &p, lr, mom),
            Some(h) => {
                let mut gh = p.dot(&self.layers[1].w.t());
                gh.zip_mut_with(&h, |g, &a| {
                    if a <= 0.0 {
                        *g = 0.0
                    }
                });
                self.layers[1].step(&h, &p, lr, mom);
                self.layers[0].step(x, &gh, lr, mom);
            }
        }
    }
}

/// Accuracy of `model` on `(x, y)`.
pub fn accuracy(model: &Model, x: &Array2<f32>, y: &[usize]) -> f64 {
    let p = model.predict(x);
    p.iter().zip(y).filter(|(a, b)| a == b).count() as f64 / y.len().max(1) as f64
}

/// Train with minibatch SGD (momentum 0.9), shuffling each epoch; returns
/// the model.
pub fn train(
    x: &Array2<f32>,
    y: &[usize],
    hidden: usize,
    epochs: usize,
    lr: f32,
    seed: u64,
) -> Model {
    let mut model = Model::new(x.ncols(), hidden, seed);
    let order = nitro_data::EpochOrder::new(x.nrows(), 64, seed).expect("width > 0");
    let ones = vec![1.0f32; 64];
    for epoch in 0..epochs as u64 {
        let perm = order.permutation(epoch);
        let decay = 1.0 / (1.0 + epoch as f32 * 0.3);
        for pos in 0..order.batches_per_epoch() {
            let slot = order.slot_in(&perm, pos).expect("in range");
            let xb = x.select(Axis(0), &slot.indices);
            let yb: Vec<usize> = slot.indices.iter().map(|&i| y[i]).collect();
            model.step(&xb, &yb, &ones, lr * decay, 0.9);
        }
    }
    model
}
