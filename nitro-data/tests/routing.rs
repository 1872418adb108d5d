//! Routing: only declared fields are gathered; a missing required field is a
//! setup error naming the field, the hook and the fields the data has.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nitro_data::{
    Batch, BatchIter, DataError, Dataset, EpochOrder, FieldSpec, HookFields, HostArray, InMemory,
    RoutingError, RoutingPlan,
};

/// Wraps a dataset and records every field it is asked for and the bytes
/// it hands out.
struct Counting {
    inner: InMemory,
    asked: Mutex<Vec<String>>,
    bytes: AtomicUsize,
}

impl Dataset for Counting {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn fields(&self) -> Vec<FieldSpec> {
        self.inner.fields()
    }
    fn gather(&self, indices: &[usize], fields: &[&str]) -> Result<Batch, DataError> {
        self.asked
            .lock()
            .unwrap()
            .extend(fields.iter().map(|s| s.to_string()));
        let b = self.inner.gather(indices, fields)?;
        self.bytes.fetch_add(b.byte_len(), Ordering::Relaxed);
        Ok(b)
    }
}

fn counting(n: usize) -> Arc<Counting> {
    let inner = InMemory::from_pairs([
        (
            "img",
            HostArray::from_vec(&[n, 4], vec![0.5f32; n * 4]).unwrap(),
        ),
        ("label", HostArray::from_vec(&[n], vec![1i32; n]).unwrap()),
        (
            "huge_metadata",
            HostArray::from_vec(&[n, 1000], vec![7u8; n * 1000]).unwrap(),
        ),
    ])
    .unwrap();
    Arc::new(Counting {
        inner,
        asked: Mutex::new(Vec::new()),
        bytes: AtomicUsize::new(0),
    })
}

#[test]
fn undeclared_fields_are_never_gathered() {
    let data = counting(100);
    let plan = RoutingPlan::for_dataset(
        &*data,
        &[
            HookFields::new("forward", &["img"], &[]),
            HookFields::new("loss", &["label"], &["weight"]),
        ],
    )
    .unwrap();
    assert_eq!(plan.transfer(), vec!["img", "label"]);
    assert_eq!(
        plan.route("loss").unwrap().absent_optional,
        vec!["weight".to_string()]
    );
    assert_eq!(
        plan.route("forward").unwrap().present,
        vec!["img".to_string()]
    );

    let order = EpochOrder::new(100, 10, 3).unwrap();
    let n = BatchIter::new(data.clone(), order, &plan.transfer())
        .unwrap()
        .map(Result::unwrap)
        .count();
    assert_eq!(n, 10);
    let asked = data.asked.lock().unwrap();
    assert!(!asked.iter().any(|f| f == "huge_metadata"), "{asked:?}");
    assert_eq!(asked.len(), 20);
    // Exactly the declared bytes: 100 samples * (4 f32 + 1 i32).
    assert_eq!(data.bytes.load(Ordering::Relaxed), 100 * (16 + 4));
    drop(asked);

    let b = plan.gather(&*data, &[0, 1]).unwrap();
    assert_eq!(b.names(), vec!["img", "label"]);
}

#[test]
fn missing_required_field_is_a_setup_error_naming_everything() {
    let data = counting(4);
    let err = RoutingPlan::for_dataset(
        &*data,
        &[
            HookFields::new("forward", &["img"], &[]),
            HookFields::new("loss", &["target"], &[]),
        ],
    )
    .unwrap_err();
    assert_eq!(
        err,
        RoutingError::MissingField {
            field: "target".into(),
            hook: "loss".into(),
            available: "img, label, huge_metadata".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "hook `loss` requires batch field `target`, but the data has no such field; the data has: \
         img, label, huge_metadata. Add `target` in build_data, rename the hook's field to one of \
         those, or declare it optional"
    );
    assert!(
        data.asked.lock().unwrap().is_empty(),
        "nothing gathered before the error"
    );
}

#[test]
fn whole_batch_hook_routes_everything() {
    let plan = RoutingPlan::resolve(
        &["a", "b", "c"],
        &[
            HookFields::new("forward", &["b"], &[]),
            HookFields::whole_batch("metrics"),
        ],
    )
    .unwrap();
    assert_eq!(plan.transfer(), vec!["a", "b", "c"]);
    let plan = RoutingPlan::resolve(
        &["a", "b", "c"],
        &[HookFields::new("forward", &["c", "a"], &["a"])],
    )
    .unwrap();
    assert_eq!(plan.transfer(), vec!["a", "c"], "data order, no duplicates");
    assert_eq!(
        plan.route("forward").unwrap().present,
        vec!["c".to_string(), "a".to_string()]
    );
}
