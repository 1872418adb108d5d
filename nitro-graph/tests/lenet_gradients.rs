//! A LeNet-style CNN (conv, pool, conv, pool, dense, dense) passes a
//! finite-difference gradient check on every parameter, in f64.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[shape.clone()]` reads better in tests

mod common;

use common::check_grad;
use nitro_graph::nn::conv::{conv2d, max_pool2d};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::ops::relu;
use nitro_graph::DType;

#[test]
fn lenet_style_cnn_gradients_match_finite_differences() {
    // x [2,1,12,12]; conv3x3x3 -> [2,3,10,10]; pool2 -> [2,3,5,5];
    // conv2x2x4 -> [2,4,4,4]; pool2 -> [2,4,2,2]; dense 16->6 -> relu; dense 6->3.
    let shapes = vec![
        vec![2, 1, 12, 12],
        vec![3, 1, 3, 3],
        vec![3],
        vec![4, 3, 2, 2],
        vec![4],
        vec![16, 6],
        vec![6],
        vec![6, 3],
        vec![3],
    ];
    check_grad(&shapes, 7, |tr, t| {
        let h = max_pool2d(&relu(&conv2d(&t[0], &t[1], Some(&t[2]), 1, 0)), 2, 2);
        let h = max_pool2d(&relu(&conv2d(&h, &t[3], Some(&t[4]), 1, 0)), 2, 2);
        let h = h.reshape(&[2, 16]);
        let h = relu(&(h.matmul(&t[5]) + t[6].reshape(&[1, 6])));
        let logits = h.matmul(&t[7]) + t[8].reshape(&[1, 3]);
        let labels = tr.literal(&[2.0, 0.0], &[2], DType::I32);
        softmax_cross_entropy(&logits, &labels, 0.0)
    });
}
