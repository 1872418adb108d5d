//! Epoch coverage, shuffle reproducibility, resume, prefetch.

use std::sync::Arc;

use nitro_data::{BatchIter, EpochOrder, HostArray, InMemory, Prefetch, ShortBatch};
use proptest::prelude::*;

/// A dataset whose `id` field is the sample index.
fn ids(n: usize) -> Arc<InMemory> {
    let id = HostArray::from_vec(&[n], (0..n as i64).collect()).unwrap();
    let x = HostArray::from_vec(&[n, 2], (0..2 * n).map(|v| v as f32).collect()).unwrap();
    Arc::new(InMemory::from_pairs([("id", id), ("x", x)]).unwrap())
}

fn ids_of(item: &nitro_data::BatchItem) -> Vec<usize> {
    let a = item.batch.get("id").unwrap().as_slice::<i64>().unwrap();
    a.iter().take(item.real).map(|&v| v as usize).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn pad_policy_visits_every_index_once(len in 1usize..300, width in 1usize..40, seed: u64, epoch in 0u64..5) {
        let data = ids(len);
        let order = EpochOrder::new(len, width, seed).unwrap().with_short_batch(ShortBatch::PadWithMask);
        let mut seen = vec![0u32; len];
        let it = BatchIter::new(data, order, &["id"]).unwrap().resume_at(epoch, 0);
        for item in it {
            let item = item.unwrap();
            prop_assert_eq!(item.width(), width);
            prop_assert_eq!(item.epoch, epoch);
            let mask = item.mask();
            prop_assert_eq!(mask.iter().sum::<f32>() as usize, item.real);
            // Padding repeats the last real sample.
            let all = item.batch.get("id").unwrap().as_slice::<i64>().unwrap();
            prop_assert!(all.iter().skip(item.real).all(|&v| v == all[item.real - 1]));
            for i in ids_of(&item) { seen[i] += 1; }
        }
        prop_assert!(seen.iter().all(|&c| c == 1));
    }

    #[test]
    fn drop_policy_yields_exactly_the_full_batches(len in 0usize..300, width in 1usize..40, seed: u64) {
        let order = EpochOrder::new(len, width, seed).unwrap();
        let items: Vec<_> = BatchIter::new(ids(len), order, &["id"]).unwrap().map(Result::unwrap).collect();
        prop_assert_eq!(items.len(), len / width);
        let mut seen: Vec<usize> = items.iter().flat_map(ids_of).collect();
        prop_assert!(items.iter().all(|i| i.real == width && i.width() == width));
        // The visited indices are the first full batches of the permutation.
        let perm = order.permutation(0);
        prop_assert_eq!(&seen[..], &perm[..(len / width) * width]);
        seen.sort_unstable();
        seen.dedup();
        prop_assert_eq!(seen.len(), (len / width) * width);
    }

    #[test]
    fn shuffles_reproduce_per_seed_and_differ_per_epoch(len in 8usize..500, seed: u64, e in 0u64..1000) {
        let a = EpochOrder::new(len, 4, seed).unwrap();
        let b = EpochOrder::new(len, 4, seed).unwrap();
        prop_assert_eq!(a.permutation(e), b.permutation(e));
        // 8! = 40320 orders: a collision between two epochs is ~2.5e-5.
        prop_assert_ne!(a.permutation(e), a.permutation(e + 1));
        let mut sorted = a.permutation(e);
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..len).collect::<Vec<_>>());
    }

    #[test]
    fn resume_yields_exactly_the_remaining_order(
        len in 1usize..200, width in 1usize..20, seed: u64, pad: bool,
        epoch in 0u64..3, cut in 0usize..30,
    ) {
        let policy = if pad { ShortBatch::PadWithMask } else { ShortBatch::Drop };
        let order = EpochOrder::new(len, width, seed).unwrap().with_short_batch(policy);
        let full: Vec<_> = BatchIter::new(ids(len), order, &["id", "x"]).unwrap()
            .until_epoch(epoch + 2).map(Result::unwrap).collect();
        let start = full.iter().position(|i| i.epoch == epoch).unwrap_or(full.len());
        let per_epoch = order.batches_per_epoch();
        let cut = cut.min(per_epoch);
        let resumed: Vec<_> = BatchIter::new(ids(len), order, &["id", "x"]).unwrap()
            .resume_at(epoch, cut).until_epoch(epoch + 2).map(Result::unwrap).collect();
        prop_assert_eq!(&resumed[..], &full[(start + cut).min(full.len())..]);
        if let Some(first) = resumed.first() {
            prop_assert_eq!(first.resume_point().1, first.position + 1);
        }
    }
}

#[test]
fn prefetch_yields_the_same_batches_in_order() {
    let data = ids(1000);
    let order = EpochOrder::new(1000, 64, 9)
        .unwrap()
        .with_short_batch(ShortBatch::PadWithMask);
    let plain: Vec<_> = BatchIter::new(data.clone(), order, &["id", "x"])
        .unwrap()
        .until_epoch(3)
        .map(Result::unwrap)
        .collect();
    let it = || {
        BatchIter::new(data.clone(), order, &["id", "x"])
            .unwrap()
            .until_epoch(3)
    };
    let pre: Vec<_> = Prefetch::new(it(), 2).map(Result::unwrap).collect();
    assert_eq!(plain, pre);
    // On the consumer's thread: the same batches, no thread.
    let inline = Prefetch::inline(it());
    assert!(!inline.is_background());
    assert_eq!(plain, inline.map(Result::unwrap).collect::<Vec<_>>());
    // `auto` takes a thread exactly where the process may use two CPUs.
    let auto = Prefetch::auto(it(), 2);
    assert_eq!(auto.is_background(), nitro_data::spare_cpu());
    assert_eq!(plain, auto.map(Result::unwrap).collect::<Vec<_>>());
}

#[test]
fn prefetch_can_be_dropped_early() {
    let it = BatchIter::new(ids(1000), EpochOrder::new(1000, 8, 1).unwrap(), &["id"])
        .unwrap()
        .until_epoch(100);
    let mut p = Prefetch::new(it, 4);
    assert!(p.next().is_some());
    drop(p); // must not hang
}

#[test]
fn bad_setup_is_an_error() {
    assert!(EpochOrder::new(10, 0, 0).is_err());
    let err = BatchIter::new(ids(10), EpochOrder::new(10, 2, 0).unwrap(), &["nope"])
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "no field `nope`; the data has: id, x");
    assert!(BatchIter::new(ids(10), EpochOrder::new(11, 2, 0).unwrap(), &["id"]).is_err());
}

#[test]
fn sequential_order_is_in_order_with_padded_tail() {
    let order = EpochOrder::sequential(10, 4).unwrap();
    let items: Vec<_> = BatchIter::new(ids(10), order, &["id"])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(items.len(), 3);
    assert_eq!(
        items.iter().flat_map(ids_of).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(items[2].real, 2);
    let with_mask = items[2].with_mask_field().unwrap();
    assert_eq!(
        with_mask.get(nitro_data::MASK_FIELD).unwrap(),
        &HostArray::from_vec(&[4], vec![1.0f32, 1.0, 0.0, 0.0]).unwrap()
    );
}
