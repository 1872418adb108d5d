//! The cache's counters: hits, misses, compiles, LRU eviction, owners, the
//! pile-up warning, concurrency and failed compiles.

#[path = "common/capture.rs"]
mod common_capture;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use nitro_cache::{
    CacheConfig, CompileCache, GoneCause, Key, KeyBuilder, OwnerToken, Reason, Stats,
};

fn key(width: usize) -> Key {
    KeyBuilder::new()
        .part("experiment", "Mnist")
        .graph_const("width", &width)
        .input_sig("img", "f32[256,784]")
        .finish()
        .unwrap()
}

fn compile_ok(value: usize) -> impl FnOnce() -> Result<usize, String> {
    move || Ok(value)
}

#[test]
fn n_lookups_of_one_key_are_one_compile_and_n_minus_one_hits() {
    let cache = CompileCache::new();
    let compiles = AtomicUsize::new(0);
    for _ in 0..10 {
        let (value, _) = cache
            .get_or_compile("train_step", &key(128), None, || {
                compiles.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(7usize)
            })
            .unwrap();
        assert_eq!(value, 7);
    }
    let stats = cache.stats("train_step");
    assert_eq!(compiles.load(Ordering::SeqCst), 1);
    assert_eq!(
        (stats.compiles, stats.misses, stats.hits, stats.live),
        (1, 1, 9, 1)
    );
    assert_eq!(cache.stats("eval_step"), Stats::default());
}

#[test]
fn kinds_are_counted_separately() {
    let cache = CompileCache::new();
    cache
        .get_or_compile("train_step", &key(1), None, compile_ok(1))
        .unwrap();
    cache
        .get_or_compile("eval_step", &key(1), None, compile_ok(2))
        .unwrap();
    let (v, outcome) = cache
        .get_or_compile("eval_step", &key(1), None, compile_ok(3))
        .unwrap();
    assert_eq!((v, outcome.is_hit()), (2, true));
    let all = cache.stats_all();
    assert_eq!(all.keys().collect::<Vec<_>>(), ["eval_step", "train_step"]);
    assert_eq!((all["eval_step"].hits, all["train_step"].hits), (1, 0));
    assert_eq!(
        all.values().fold(Stats::default(), |a, s| a.merge(*s)).live,
        2
    );
}

#[test]
fn eviction_is_least_recently_used() {
    let cache = CompileCache::with_config(CacheConfig {
        capacity: 3,
        pileup_threshold: 100,
    });
    for w in [1, 2, 3] {
        cache
            .get_or_compile("step", &key(w), None, compile_ok(w))
            .unwrap();
    }
    // Touch 1, so 2 is now the least recently used.
    assert!(cache
        .get_or_compile("step", &key(1), None, compile_ok(0))
        .unwrap()
        .1
        .is_hit());
    cache
        .get_or_compile("step", &key(4), None, compile_ok(4))
        .unwrap();
    assert_eq!(cache.stats("step").evictions, 1);
    assert_eq!(
        cache.explain_miss("step", &key(2)).reason,
        Reason::Gone(GoneCause::Evicted)
    );
    for w in [1, 3, 4] {
        assert_eq!(cache.explain_miss("step", &key(w)).reason, Reason::Live);
    }
    // Then 3 (untouched since insertion) goes next, across kinds too.
    cache
        .get_or_compile("other", &key(9), None, compile_ok(9))
        .unwrap();
    assert_eq!(
        cache.explain_miss("step", &key(3)).reason,
        Reason::Gone(GoneCause::Evicted)
    );
    assert_eq!(cache.len(), 3);
    let (_, outcome) = cache
        .get_or_compile("step", &key(2), None, compile_ok(2))
        .unwrap();
    assert!(!outcome.is_hit());
    assert!(outcome
        .explanation()
        .unwrap()
        .to_string()
        .contains("evicted"));
}

#[test]
fn shrinking_the_capacity_evicts_at_once() {
    let cache = CompileCache::new();
    for w in 0..5 {
        cache
            .get_or_compile("step", &key(w), None, compile_ok(w))
            .unwrap();
    }
    cache.configure(CacheConfig {
        capacity: 2,
        ..cache.config()
    });
    assert_eq!((cache.len(), cache.stats("step").evictions), (2, 3));
}

#[test]
fn dropping_the_owner_frees_its_entries() {
    let cache = CompileCache::new();
    let a = OwnerToken::new();
    let b = OwnerToken::new();
    cache
        .get_or_compile("step", &key(1), Some(&a), compile_ok(1))
        .unwrap();
    cache
        .get_or_compile("step", &key(2), Some(&a), compile_ok(2))
        .unwrap();
    cache
        .get_or_compile("step", &key(2), Some(&b), compile_ok(2))
        .unwrap();
    cache
        .get_or_compile("step", &key(3), Some(&a), compile_ok(3))
        .unwrap();
    cache
        .get_or_compile("step", &key(3), None, compile_ok(3))
        .unwrap(); // pinned
    assert_eq!(cache.stats("step").live, 3);

    drop(a);
    let stats = cache.stats("step");
    assert_eq!((stats.live, stats.freed), (2, 1));
    assert_eq!(
        cache.explain_miss("step", &key(1)).reason,
        Reason::Gone(GoneCause::OwnerDropped)
    );
    drop(b);
    let stats = cache.stats("step");
    assert_eq!((stats.live, stats.freed), (1, 2));
    assert_eq!(cache.explain_miss("step", &key(3)).reason, Reason::Live);
}

#[test]
fn an_owner_outliving_its_cache_is_harmless() {
    let owner = OwnerToken::new();
    {
        let cache = CompileCache::new();
        cache
            .get_or_compile("step", &key(1), Some(&owner), compile_ok(1))
            .unwrap();
    }
    drop(owner);
}

#[test]
fn dropped_values_are_released() {
    let cache = CompileCache::new();
    let owner = OwnerToken::new();
    let program = Arc::new("program");
    cache
        .get_or_compile("step", &key(1), Some(&owner), || {
            Ok::<_, ()>(program.clone())
        })
        .unwrap();
    assert_eq!(Arc::strong_count(&program), 2);
    drop(owner);
    assert_eq!(Arc::strong_count(&program), 1);
}

#[test]
fn the_pileup_warning_fires_once_and_names_the_changing_part() {
    let cache = CompileCache::with_config(CacheConfig {
        capacity: 100,
        pileup_threshold: 3,
    });
    let ((), log) = common_capture::capture(tracing::Level::WARN, || {
        for w in 0..8 {
            cache
                .get_or_compile("train_step", &key(w), None, compile_ok(w))
                .unwrap();
        }
    });
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains(
            "program `train_step` has 4 live compiled entries (more than 3); parts that keep \
             changing: graph_const `width` (4 values: 0, 1, 2, …)"
        ),
        "{log}"
    );
    assert!(!warnings[0].contains("`img`"), "{log}");
    assert!(cache.stats("train_step").pileup_warned);
}

#[test]
fn concurrent_lookups_of_one_key_compile_once() {
    let cache = Arc::new(CompileCache::new());
    let compiles = Arc::new(AtomicUsize::new(0));
    let threads = 8;
    let per_thread = 25;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (cache, compiles, barrier) = (cache.clone(), compiles.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..per_thread {
                    let (v, _) = cache
                        .get_or_compile("step", &key(1), None, || {
                            compiles.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(50));
                            Ok::<_, ()>(42usize)
                        })
                        .unwrap();
                    assert_eq!(v, 42);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = cache.stats("step");
    assert_eq!(compiles.load(Ordering::SeqCst), 1);
    assert_eq!(
        (stats.compiles, stats.hits),
        (1, (threads * per_thread - 1) as u64)
    );
}

#[test]
fn a_failed_compile_caches_nothing() {
    let cache: CompileCache<usize> = CompileCache::new();
    let error = cache
        .get_or_compile("step", &key(1), None, || Err("shape mismatch"))
        .unwrap_err();
    assert_eq!(error, "shape mismatch");
    let stats = cache.stats("step");
    assert_eq!(
        (stats.failed_compiles, stats.compiles, stats.live),
        (1, 0, 0)
    );
    let (_, outcome) = cache
        .get_or_compile("step", &key(1), None, compile_ok(1))
        .unwrap();
    assert!(!outcome.is_hit());
}

#[test]
fn a_panicking_compile_does_not_wedge_the_key() {
    let cache: CompileCache<usize> = CompileCache::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.get_or_compile("step", &key(1), None, || -> Result<usize, ()> {
            panic!("boom")
        })
    }));
    assert!(result.is_err());
    let (v, _) = cache
        .get_or_compile("step", &key(1), None, compile_ok(5))
        .unwrap();
    assert_eq!(v, 5);
    assert_eq!(cache.stats("step").failed_compiles, 1);
}

#[test]
fn the_global_cache_is_one_per_value_type() {
    #[derive(Clone)]
    struct Program(u32);
    let cache = nitro_cache::global::<Arc<Program>>();
    let k = key(77);
    cache
        .get_or_compile("global_test", &k, None, || {
            Ok::<_, ()>(Arc::new(Program(3)))
        })
        .unwrap();
    let (p, outcome) = nitro_cache::global::<Arc<Program>>()
        .get_or_compile("global_test", &k, None, || {
            Ok::<_, ()>(Arc::new(Program(4)))
        })
        .unwrap();
    assert!(outcome.is_hit());
    assert_eq!(p.0, 3);
}
