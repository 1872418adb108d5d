//! Owner tokens: entries tied to an owner leave every cache when the last of
//! their owners is dropped (Flux frees a step when its model is collected).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;

use parking_lot::Mutex;

/// Something a cache does when an owner goes away.
pub(crate) trait ReleaseOwner: Send + Sync {
    fn release_owner(&self, owner: u64);
}

/// An owner of cache entries (a model, an experiment handle). Entries looked
/// up with `Some(&token)` are freed when every token that looked them up has
/// been dropped; an entry also looked up with no owner stays until evicted.
///
/// ```
/// use nitro_cache::{CompileCache, KeyBuilder, OwnerToken};
/// let cache: CompileCache<u32> = CompileCache::new();
/// let key = KeyBuilder::new().part("model", "mlp").finish().unwrap();
/// let owner = OwnerToken::new();
/// cache.get_or_compile("step", &key, Some(&owner), || Ok::<_, ()>(7)).unwrap();
/// assert_eq!(cache.stats("step").live, 1);
/// drop(owner);
/// assert_eq!(cache.stats("step").live, 0);
/// ```
pub struct OwnerToken {
    id: u64,
    caches: Mutex<Vec<(u64, Weak<dyn ReleaseOwner>)>>,
}

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

impl OwnerToken {
    /// A fresh owner, distinct from every other in the process.
    pub fn new() -> Self {
        OwnerToken {
            id: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            caches: Mutex::new(Vec::new()),
        }
    }

    /// The process-unique id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Remember to tell cache `cache_id` when this owner is dropped.
    pub(crate) fn register(&self, cache_id: u64, cache: Weak<dyn ReleaseOwner>) {
        let mut caches = self.caches.lock();
        if !caches.iter().any(|(id, _)| *id == cache_id) {
            caches.push((cache_id, cache));
        }
    }
}

impl Default for OwnerToken {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnerToken({})", self.id)
    }
}

impl Drop for OwnerToken {
    fn drop(&mut self) {
        let caches = std::mem::take(&mut *self.caches.lock());
        for (_, cache) in caches {
            if let Some(cache) = cache.upgrade() {
                cache.release_owner(self.id);
            }
        }
    }
}
