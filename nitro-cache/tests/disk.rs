//! The persistent tier: a round trip across two processes, rejection of
//! truncated, corrupt and foreign entries, concurrent writers, the size cap.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use nitro_cache::{DiskConfig, DiskLookup, DiskOutcome, DiskStore, Key, KeyBuilder, RejectReason};

fn key(name: &str) -> Key {
    KeyBuilder::new()
        .part("kernel", name)
        .graph_const("block", &(16u32, 16u32))
        .finish()
        .unwrap()
}

fn open(dir: &Path) -> DiskStore {
    DiskStore::open(dir, DiskConfig::default()).unwrap()
}

fn ptx(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

const CHILD_DIR: &str = "NITRO_CACHE_TEST_CHILD_DIR";

/// The child half writes an entry; the parent half (a fresh process) reads it
/// back without building. Also shows the key is stable across processes.
#[test]
fn round_trip_across_two_processes() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let (bytes, outcome) = open(Path::new(&dir))
            .get_or_build("ptx", &key("gemm"), || Ok::<_, ()>(ptx(7, 4096)))
            .unwrap();
        assert_eq!(outcome, DiskOutcome::Built { rejected: None });
        assert_eq!(bytes, ptx(7, 4096));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "round_trip_across_two_processes",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "child process failed: {status}");
    let (bytes, outcome) = open(dir.path())
        .get_or_build("ptx", &key("gemm"), || -> Result<Vec<u8>, ()> {
            panic!("the entry written by the child must be loaded, not rebuilt")
        })
        .unwrap();
    assert_eq!(outcome, DiskOutcome::Loaded);
    assert_eq!(bytes, ptx(7, 4096));
}

#[test]
fn a_truncated_entry_is_rejected_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert!(store.store("ptx", &key("gemm"), &ptx(1, 1000)).unwrap());
    let path = store.path_for("ptx", &key("gemm"));
    let full = std::fs::read(&path).unwrap();
    for cut in [0, 7, 83, full.len() / 2, full.len() - 1] {
        std::fs::write(&path, &full[..cut]).unwrap();
        let lookup = store.lookup("ptx", &key("gemm")).unwrap();
        assert!(
            matches!(lookup, DiskLookup::Rejected(RejectReason::Truncated)),
            "cut at {cut}: {lookup:?}"
        );
        assert!(!path.exists(), "a rejected entry is removed");
        std::fs::write(&path, &full[..cut]).unwrap();
        let (bytes, outcome) = store
            .get_or_build("ptx", &key("gemm"), || Ok::<_, ()>(ptx(2, 1000)))
            .unwrap();
        assert_eq!(
            (bytes, outcome),
            (
                ptx(2, 1000),
                DiskOutcome::Built {
                    rejected: Some(RejectReason::Truncated)
                }
            )
        );
        assert_eq!(
            store.lookup("ptx", &key("gemm")).unwrap(),
            DiskLookup::Hit(ptx(2, 1000))
        );
    }
}

#[test]
fn corrupt_wrong_and_foreign_entries_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let path = store.path_for("ptx", &key("gemm"));

    store.store("ptx", &key("gemm"), &ptx(1, 100)).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(
        store.lookup("ptx", &key("gemm")).unwrap(),
        DiskLookup::Rejected(RejectReason::Checksum)
    );

    std::fs::write(&path, b"not a cache entry, just some text of decent length........................................................................").unwrap();
    assert_eq!(
        store.lookup("ptx", &key("gemm")).unwrap(),
        DiskLookup::Rejected(RejectReason::BadMagic)
    );

    // Another key's entry copied over this one's file.
    store.store("ptx", &key("conv"), &ptx(3, 100)).unwrap();
    std::fs::copy(store.path_for("ptx", &key("conv")), &path).unwrap();
    assert_eq!(
        store.lookup("ptx", &key("gemm")).unwrap(),
        DiskLookup::Rejected(RejectReason::WrongEntry)
    );

    // Written under another fingerprint (another driver, toolchain, version).
    let foreign = DiskStore::open(
        dir.path(),
        DiskConfig {
            fingerprint_extra: "cuda 12.8".into(),
            ..DiskConfig::default()
        },
    )
    .unwrap();
    assert_ne!(foreign.fingerprint(), store.fingerprint());
    assert_ne!(foreign.path_for("ptx", &key("gemm")), path);
    foreign.store("ptx", &key("gemm"), &ptx(4, 100)).unwrap();
    std::fs::copy(foreign.path_for("ptx", &key("gemm")), &path).unwrap();
    assert_eq!(
        store.lookup("ptx", &key("gemm")).unwrap(),
        DiskLookup::Rejected(RejectReason::ForeignFingerprint)
    );
    assert_eq!(
        store.lookup("ptx", &key("gemm")).unwrap(),
        DiskLookup::Missing
    );
}

#[test]
fn concurrent_writers_never_leave_a_partial_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let writers = 6;
    let len = 256 * 1024;
    let barrier = Arc::new(Barrier::new(writers + 1));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, barrier, done) = (store.clone(), barrier.clone(), done.clone());
        std::thread::spawn(move || {
            barrier.wait();
            let mut hits = 0;
            while !done.load(Ordering::SeqCst) {
                match store.lookup("ptx", &key("gemm")).unwrap() {
                    DiskLookup::Hit(bytes) => {
                        assert_eq!(bytes.len(), len);
                        assert_eq!(bytes, ptx(bytes[0], len), "a mixture of two writes");
                        hits += 1;
                    }
                    DiskLookup::Missing => {}
                    DiskLookup::Rejected(reason) => panic!("a reader saw a bad entry: {reason}"),
                }
            }
            hits
        })
    };
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (store, barrier) = (store.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for round in 0..10 {
                    store
                        .store("ptx", &key("gemm"), &ptx((w * 10 + round) as u8, len))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let hits = reader.join().unwrap();
    assert!(hits > 0, "the reader never saw an entry");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "temporary files left behind: {leftovers:?}"
    );
    assert!(matches!(
        store.lookup("ptx", &key("gemm")).unwrap(),
        DiskLookup::Hit(_)
    ));
}

#[test]
fn the_size_cap_drops_least_recently_used_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(
        dir.path(),
        DiskConfig {
            max_bytes: 3 * 1200,
            ..DiskConfig::default()
        },
    )
    .unwrap();
    let set_age = |name: &str, secs_ago: u64| {
        let file = std::fs::File::options()
            .write(true)
            .open(store.path_for("ptx", &key(name)))
            .unwrap();
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago))
            .unwrap();
    };
    for (name, age) in [("a", 30), ("b", 20), ("c", 10)] {
        store.store("ptx", &key(name), &ptx(0, 1000)).unwrap();
        set_age(name, age);
    }
    // A hit on "a" makes it the most recently used.
    assert!(matches!(
        store.lookup("ptx", &key("a")).unwrap(),
        DiskLookup::Hit(_)
    ));
    store.store("ptx", &key("d"), &ptx(0, 1000)).unwrap();
    assert!(store.total_bytes().unwrap() <= 3 * 1200);
    assert_eq!(store.lookup("ptx", &key("b")).unwrap(), DiskLookup::Missing);
    for name in ["a", "c", "d"] {
        assert!(
            matches!(store.lookup("ptx", &key(name)).unwrap(), DiskLookup::Hit(_)),
            "{name}"
        );
    }
    // An entry larger than the cap is not written at all.
    assert!(!store.store("ptx", &key("huge"), &ptx(0, 5000)).unwrap());
}
