//! `#[derive(Fields)]` batch declarations and `#[derive(Tree)]` leaf trees.

use std::collections::BTreeMap;

use nitro_markers::{leaf_kind, BatchFields, Fields, MissingField, Tree, TreeError, WholeBatch};

/// A stand-in tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor(Vec<f32>);

leaf_kind!(
    /// Trees of `Tensor`s.
    pub struct Tensors => Tensor
);

/// What `forward` takes.
#[derive(Fields, Debug, PartialEq)]
pub struct Inputs<T> {
    /// Required.
    pub img: T,
    /// Optional.
    pub mask: Option<T>,
}

/// A non-generic declaration: the leaf is the field type.
#[derive(Fields, Debug)]
pub struct Labels {
    /// Required.
    pub label: Tensor,
}

fn batch() -> BTreeMap<String, Tensor> {
    [("img", 1.0), ("label", 2.0), ("extra", 3.0)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Tensor(vec![v])))
        .collect()
}

#[test]
fn fields_expose_names_and_build_from_the_batch() {
    assert_eq!(
        <Inputs<Tensor> as BatchFields<Tensor>>::required_fields(),
        ["img"]
    );
    assert_eq!(
        <Inputs<Tensor> as BatchFields<Tensor>>::optional_fields(),
        ["mask"]
    );
    assert!(!<Inputs<Tensor> as BatchFields<Tensor>>::takes_whole_batch());
    let mut b = batch();
    let inputs = Inputs::from_batch(&mut b).unwrap();
    assert_eq!(
        inputs,
        Inputs {
            img: Tensor(vec![1.0]),
            mask: None
        }
    );
    assert_eq!(Labels::from_batch(&mut b).unwrap().label, Tensor(vec![2.0]));
    let err: MissingField = Labels::from_batch(&mut b).unwrap_err();
    assert_eq!(err.field, "label");
    let msg = err.to_string();
    assert!(
        msg.contains("`Labels`") && msg.contains("extra") && msg.contains("Option<_>"),
        "{msg}"
    );
}

#[test]
fn whole_batch_takes_everything_unchecked() {
    assert!(WholeBatch::<Tensor>::takes_whole_batch());
    let all = WholeBatch::from_batch(&mut batch()).unwrap();
    assert_eq!(all.0.keys().collect::<Vec<_>>(), ["extra", "img", "label"]);
}

/// A dense layer's params.
#[derive(Tree, Debug, Clone, PartialEq)]
pub struct Dense<T> {
    /// Weight.
    pub weight: T,
    /// Bias.
    pub bias: Option<T>,
}

/// A decoder: nested structs, a Vec, a map.
#[derive(Tree, Debug, Clone, PartialEq)]
pub struct Decoder {
    /// First layer.
    pub dense1: Dense<Tensor>,
    /// Further layers.
    pub blocks: Vec<Dense<Tensor>>,
    /// Named extras.
    pub extra: BTreeMap<String, (Tensor, [Tensor; 2])>,
}

/// Outputs, as a tuple struct.
#[derive(Tree, Debug, Clone, PartialEq)]
pub struct Pair(pub Tensor, pub Tensor);

fn t(x: f32) -> Tensor {
    Tensor(vec![x])
}

fn decoder() -> Decoder {
    Decoder {
        dense1: Dense {
            weight: t(1.0),
            bias: Some(t(2.0)),
        },
        blocks: vec![Dense {
            weight: t(3.0),
            bias: None,
        }],
        extra: [("z".to_string(), (t(4.0), [t(5.0), t(6.0)]))].into(),
    }
}

#[test]
fn trees_walk_into_checkpoint_paths_and_rebuild() {
    let d = decoder();
    let paths = Tree::<Tensors>::paths(&d);
    assert_eq!(
        paths,
        [
            "dense1.weight",
            "dense1.bias",
            "blocks.0.weight",
            "extra.z.0",
            "extra.z.1.0",
            "extra.z.1.1"
        ]
    );
    let doubled: Vec<Tensor> = Tree::<Tensors>::leaves(&d)
        .into_iter()
        .map(|(_, l)| Tensor(vec![l.0[0] * 2.0]))
        .collect();
    let rebuilt = Tree::<Tensors>::with_leaves(&d, doubled).unwrap();
    assert_eq!(rebuilt.dense1.bias, Some(t(4.0)));
    assert_eq!(rebuilt.extra["z"].1[1], t(12.0));
    assert_eq!(Tree::<Tensors>::paths(&Pair(t(0.0), t(1.0))), ["0", "1"]);
    assert_eq!(Tree::<Tensors>::paths(&t(0.0)), [""]);
}

#[test]
fn rebuild_checks_the_leaf_count() {
    let d = decoder();
    let err = Tree::<Tensors>::with_leaves(&d, vec![t(0.0); 2]).unwrap_err();
    assert_eq!(
        err,
        TreeError::TooFewLeaves {
            path: "blocks.0.weight".into()
        }
    );
    let err = Tree::<Tensors>::with_leaves(&d, vec![t(0.0); 8]).unwrap_err();
    assert_eq!(
        err,
        TreeError::TooManyLeaves {
            expected: 6,
            extra: 2
        }
    );
}
