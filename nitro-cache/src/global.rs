//! One process-wide cache per value type, for callers that would rather not
//! declare their own static.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::cache::CompileCache;

type Registry = Mutex<HashMap<TypeId, &'static (dyn Any + Send + Sync)>>;

/// The process-wide cache for values of type `V`, created on first use with
/// the default configuration (change it with [`CompileCache::configure`]).
/// Every call with the same `V` returns the same cache.
///
/// ```
/// let cache = nitro_cache::global::<std::sync::Arc<Vec<u8>>>();
/// assert!(std::ptr::eq(cache, nitro_cache::global::<std::sync::Arc<Vec<u8>>>()));
/// ```
pub fn global<V: Clone + Send + Sync + 'static>() -> &'static CompileCache<V> {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    let mut registry = REGISTRY.get_or_init(Default::default).lock();
    let cache = *registry.entry(TypeId::of::<V>()).or_insert_with(|| {
        let leaked: &'static CompileCache<V> = Box::leak(Box::new(CompileCache::<V>::new()));
        leaked
    });
    cache
        .downcast_ref::<CompileCache<V>>()
        .expect("the registry maps each TypeId to a cache of that type")
}
