//! Decoding never allocates far beyond the input's size: a counting global
//! allocator records the peak live bytes while hostile inputs are decoded.
//! One test in this binary, so no other thread disturbs the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use nitro_ckpt::format::reseal;
use nitro_ckpt::{decode, encode, Checkpoint, TensorEntry};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Peak bytes allocated above the current level while decoding `bytes`.
fn peak_while_decoding(bytes: &[u8]) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let _ = decode(bytes);
    PEAK.load(Ordering::SeqCst) - base
}

#[test]
fn hostile_inputs_allocate_in_proportion_to_their_size() {
    let mut c = Checkpoint::default();
    c.push(
        "p",
        TensorEntry::from_f32("w", vec![64], &[0.5; 64]).unwrap(),
    );
    let valid = encode(&c).unwrap();
    let mut inputs = vec![valid.clone()];
    // Every length-like word overwritten with huge values, resealed so the
    // decoder believes the index.
    for at in 0..valid.len().saturating_sub(8) {
        let mut b = valid.clone();
        b[at..at + 8].copy_from_slice(&(u64::MAX / 3).to_le_bytes());
        reseal(&mut b);
        inputs.push(b);
        let mut b = valid.clone();
        b[at] = 0x9b; // CBOR array with an 8-byte length follows
        reseal(&mut b);
        inputs.push(b);
    }
    for input in &inputs {
        let peak = peak_while_decoding(input);
        // The file's own bytes (tensor + index copies) plus decoder scratch.
        let bound = 16 * input.len() + (64 << 10);
        assert!(
            peak <= bound,
            "{peak} bytes allocated decoding {} bytes",
            input.len()
        );
    }
}
