//! Bad input is an error that names the op and the offending shapes (or
//! the input and both signatures), never a panic.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[shape.clone()]` reads better in tests

use nitro_graph::nn::conv::conv2d;
use nitro_graph::{compile, trace, Array, CompileOptions, DType, GraphError, TensorSpec};

fn trace_err(
    shapes: &[&[usize]],
    f: impl FnOnce(&[nitro_graph::Tensor]) -> nitro_graph::Tensor,
) -> String {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let specs: Vec<(&str, TensorSpec)> = names
        .iter()
        .zip(shapes)
        .map(|(n, s)| (n.as_str(), TensorSpec::f32(s)))
        .collect();
    trace(&specs, |_, t| Ok(vec![("y".into(), f(t))]))
        .unwrap_err()
        .to_string()
}

#[test]
fn no_implicit_rank_promotion() {
    let msg = trace_err(&[&[4, 1], &[4]], |t| &t[0] + &t[1]);
    assert!(
        msg.contains("`add`") && msg.contains("[4,1] and [4]") && msg.contains("reshape"),
        "{msg}"
    );
}

#[test]
fn incompatible_axes() {
    let msg = trace_err(&[&[3, 2], &[3, 5]], |t| &t[0] * &t[1]);
    assert!(
        msg.contains("`mul`") && msg.contains("[3,2] and [3,5]"),
        "{msg}"
    );
}

#[test]
fn matmul_contracting_dims() {
    let msg = trace_err(&[&[2, 3], &[4, 5]], |t| t[0].matmul(&t[1]));
    assert!(
        msg.contains("`matmul`") && msg.contains("[2,3] and [4,5]") && msg.contains("3 vs 4"),
        "{msg}"
    );
}

#[test]
fn reshape_element_count() {
    let msg = trace_err(&[&[2, 3]], |t| t[0].reshape(&[4, 2]));
    assert!(
        msg.contains("`reshape`") && msg.contains("[2,3] and [4,2]"),
        "{msg}"
    );
}

#[test]
fn bad_reduction_axis() {
    let msg = trace_err(&[&[2, 3]], |t| t[0].sum(&[2]));
    assert!(
        msg.contains("`reduce_sum`") && msg.contains("[2,3]"),
        "{msg}"
    );
}

#[test]
fn conv_channel_mismatch() {
    let msg = trace_err(&[&[1, 3, 8, 8], &[4, 2, 3, 3]], |t| {
        conv2d(&t[0], &t[1], None, 1, 0)
    });
    assert!(
        msg.contains("`conv2d`") && msg.contains("[1,3,8,8] and [4,2,3,3]"),
        "{msg}"
    );
}

#[test]
fn dtype_mismatch_names_both() {
    let specs = [
        ("a", TensorSpec::f32(&[2])),
        ("b", TensorSpec::new(DType::F64, &[2])),
    ];
    let msg = trace(&specs, |_, t| Ok(vec![("y".into(), &t[0] + &t[1])]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`add`") && msg.contains("f32 and f64") && msg.contains("cast"),
        "{msg}"
    );
}

#[test]
fn storage_dtypes_must_be_cast() {
    let specs = [("a", TensorSpec::new(DType::F16, &[2]))];
    let msg = trace(&specs, |_, t| Ok(vec![("y".into(), t[0].exp())]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("f16 is a storage type") && msg.contains("cast to f32"),
        "{msg}"
    );
}

#[test]
fn scatter_add_takes_numbers_not_storage_types_or_bools() {
    for (dtype, says) in [
        (DType::BF16, "bf16 is a storage type"),
        (DType::Bool, "got bool updates"),
    ] {
        let specs = [
            ("u", TensorSpec::new(dtype, &[3, 2])),
            ("i", TensorSpec::new(DType::I32, &[3])),
        ];
        let msg = trace(&specs, |_, t| {
            Ok(vec![("y".into(), t[0].scatter_add(&t[1], 4))])
        })
        .unwrap_err()
        .to_string();
        assert!(msg.contains("scatter_add") && msg.contains(says), "{msg}");
    }
}

#[test]
fn differentiating_a_non_scalar_or_an_integer() {
    let specs = [("x", TensorSpec::f32(&[3]))];
    let err = trace(&specs, |tr, t| {
        let g = tr.grad(&t[0].exp(), &[&t[0]])?;
        Ok(vec![("g".into(), g[0].clone())])
    })
    .unwrap_err();
    assert!(
        matches!(err, GraphError::Grad(_)) && err.to_string().contains("float scalar, got f32[3]"),
        "{err}"
    );
    let specs = [
        ("x", TensorSpec::f32(&[3])),
        ("i", TensorSpec::new(DType::I32, &[3])),
    ];
    let err = trace(&specs, |tr, t| {
        let loss = (&t[0] * &t[1].cast(DType::F32)).sum_all();
        let g = tr.grad(&loss, &[&t[1]])?;
        Ok(vec![("g".into(), g[0].clone())])
    })
    .unwrap_err();
    assert!(
        err.to_string().contains("integer or bool tensor (i32[3])"),
        "{err}"
    );
}

#[test]
fn calling_with_another_signature_names_the_input() {
    let program = compile(
        &[("img", TensorSpec::f32(&[4, 2]))],
        CompileOptions::named("predict"),
        |_, t| Ok(vec![("y".into(), t[0].exp())]),
    )
    .unwrap();
    let err = program
        .run(&mut [Array::new(&[3, 2], vec![0.0f32; 6]).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`predict`")
            && err.contains("`img`")
            && err.contains("f32[4,2]")
            && err.contains("f32[3,2]"),
        "{err}"
    );
    let err = program.run(&mut []).unwrap_err().to_string();
    assert!(err.contains("takes 1 inputs (img), got 0"), "{err}");
}

#[test]
fn unknown_donation_names_the_known_inputs() {
    let err = compile(
        &[("w", TensorSpec::f32(&[2]))],
        CompileOptions::named("step").donate("v", "y"),
        |_, t| Ok(vec![("y".into(), t[0].exp())]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("unknown donated input `v`") && err.contains("known: w"),
        "{err}"
    );
}
