//! The compile cache: a thread-safe map from (program kind, key) to a compiled
//! value, with per-kind counters, LRU eviction, owner-tied entries, a
//! one-time pile-up warning and explained misses.
//!
//! One mutex guards the tables; it is never held while user code runs (the
//! compile closure, a value's `Drop`, a tracing subscriber). Concurrent
//! lookups of a key being compiled wait for that compile instead of starting
//! a second one, and count as hits. Eviction scans for the least recently
//! used entry, O(live entries), and runs only after a compile, which costs
//! far more.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::explain::{self, Explanation, GoneCause, Reason};
use crate::key::Key;
use crate::owner::{OwnerToken, ReleaseOwner};
use crate::pileup;
use crate::stats::Stats;
use crate::switches;

/// Size limits of a [`CompileCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Live entries across all kinds before the least recently used is
    /// evicted (at least 1).
    pub capacity: usize,
    /// Live entries of one kind above which the pile-up warning fires, once
    /// per kind. Flux warns past "a handful"; a training run needs one train
    /// step, one eval step and perhaps one for a short final batch.
    pub pileup_threshold: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: 256,
            pileup_threshold: 8,
        }
    }
}

/// Whether a lookup hit, and if not, why it compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Served from a live entry.
    Hit,
    /// Compiled; the explanation names what differs from the nearest entry.
    Miss(Explanation),
}

impl Outcome {
    /// True for [`Outcome::Hit`].
    pub fn is_hit(&self) -> bool {
        matches!(self, Outcome::Hit)
    }

    /// The explanation of a miss.
    pub fn explanation(&self) -> Option<&Explanation> {
        match self {
            Outcome::Hit => None,
            Outcome::Miss(e) => Some(e),
        }
    }
}

/// A blake3 digest, hashed into a `HashMap` by its first eight bytes (it is
/// already uniformly distributed; SipHash over it would be wasted work).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Digest([u8; 32]);

impl Hash for Digest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut head = [0; 8];
        head.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(head));
    }
}

#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type DigestMap<T> = HashMap<Digest, T, BuildHasherDefault<DigestHasher>>;

/// Forget why keys left once this many are remembered per kind.
const GONE_MEMORY: usize = 4096;

struct Entry<V> {
    value: V,
    key: Key,
    last_used: u64,
    /// `None`: pinned (looked up without an owner), lives until evicted.
    owners: Option<Vec<u64>>,
}

enum Slot<V> {
    Pending,
    Ready(Entry<V>),
}

struct Table<V> {
    slots: DigestMap<Slot<V>>,
    gone: DigestMap<GoneCause>,
    stats: Stats,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            slots: DigestMap::default(),
            gone: DigestMap::default(),
            stats: Stats::default(),
        }
    }
}

impl<V> Table<V> {
    fn ready(&self) -> impl Iterator<Item = &Entry<V>> {
        self.slots.values().filter_map(|slot| match slot {
            Slot::Ready(entry) => Some(entry),
            Slot::Pending => None,
        })
    }

    fn forget(&mut self, digest: Digest, cause: GoneCause) -> Option<V> {
        if !matches!(self.slots.get(&digest), Some(Slot::Ready(_))) {
            return None;
        }
        match self.slots.remove(&digest) {
            Some(Slot::Ready(entry)) => {
                if self.gone.len() >= GONE_MEMORY {
                    self.gone.clear();
                }
                self.gone.insert(digest, cause);
                self.stats.live -= 1;
                match cause {
                    GoneCause::Evicted => self.stats.evictions += 1,
                    GoneCause::OwnerDropped => self.stats.freed += 1,
                }
                Some(entry.value)
            }
            _ => None,
        }
    }
}

struct State<V> {
    config: CacheConfig,
    tick: u64,
    live: usize,
    kinds: HashMap<String, Table<V>>,
}

impl<V> State<V> {
    fn table(&mut self, kind: &str) -> &mut Table<V> {
        if !self.kinds.contains_key(kind) {
            self.kinds.insert(kind.to_owned(), Table::default());
        }
        self.kinds.get_mut(kind).expect("inserted above")
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Evict least recently used entries until within capacity.
    fn evict_to_capacity(&mut self, evicted: &mut Vec<V>) {
        while self.live > self.config.capacity.max(1) {
            let oldest = self
                .kinds
                .iter()
                .flat_map(|(kind, table)| {
                    table
                        .slots
                        .iter()
                        .filter_map(move |(digest, slot)| match slot {
                            Slot::Ready(e) => Some((e.last_used, kind, *digest)),
                            Slot::Pending => None,
                        })
                })
                .min_by_key(|(tick, _, _)| *tick)
                .map(|(_, kind, digest)| (kind.clone(), digest));
            let Some((kind, digest)) = oldest else { return };
            if let Some(value) = self.table(&kind).forget(digest, GoneCause::Evicted) {
                self.live -= 1;
                evicted.push(value);
            }
        }
    }
}

struct Shared<V> {
    id: u64,
    state: Mutex<State<V>>,
    ready: Condvar,
}

impl<V: Send + 'static> ReleaseOwner for Shared<V> {
    fn release_owner(&self, owner: u64) {
        let mut freed = Vec::new();
        {
            let mut state = self.state.lock();
            let State { kinds, live, .. } = &mut *state;
            for table in kinds.values_mut() {
                let orphaned: Vec<Digest> = table
                    .slots
                    .iter_mut()
                    .filter_map(|(digest, slot)| match slot {
                        Slot::Ready(Entry {
                            owners: Some(owners),
                            ..
                        }) if owners.contains(&owner) => {
                            owners.retain(|o| *o != owner);
                            owners.is_empty().then_some(*digest)
                        }
                        _ => None,
                    })
                    .collect();
                for digest in orphaned {
                    if let Some(value) = table.forget(digest, GoneCause::OwnerDropped) {
                        *live -= 1;
                        freed.push(value);
                    }
                }
            }
        }
        drop(freed);
    }
}

static NEXT_CACHE: AtomicU64 = AtomicU64::new(1);

/// A process-wide memo of compiled values, by program kind and [`Key`].
///
/// Usable as a static:
///
/// ```
/// use std::sync::{Arc, LazyLock};
/// use nitro_cache::{CompileCache, KeyBuilder};
/// static CACHE: LazyLock<CompileCache<Arc<String>>> = LazyLock::new(CompileCache::new);
///
/// let key = KeyBuilder::new().graph_const("width", &128usize).finish().unwrap();
/// let (program, outcome) = CACHE
///     .get_or_compile("train_step", &key, None, || Ok::<_, String>(Arc::new("ptx".into())))
///     .unwrap();
/// assert!(!outcome.is_hit());
/// let (_, outcome) = CACHE
///     .get_or_compile("train_step", &key, None, || Err::<_, String>("not called".into()))
///     .unwrap();
/// assert!(outcome.is_hit());
/// ```
pub struct CompileCache<V> {
    shared: Arc<Shared<V>>,
}

impl<V: Clone + Send + 'static> Default for CompileCache<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> std::fmt::Debug for CompileCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("CompileCache")
            .field("config", &state.config)
            .field("live", &state.live)
            .field("kinds", &state.kinds.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<V: Clone + Send + 'static> CompileCache<V> {
    /// An empty cache with [`CacheConfig::default`].
    pub fn new() -> Self {
        Self::with_config(CacheConfig::default())
    }

    /// An empty cache with the given limits.
    pub fn with_config(config: CacheConfig) -> Self {
        CompileCache {
            shared: Arc::new(Shared {
                id: NEXT_CACHE.fetch_add(1, Ordering::Relaxed),
                state: Mutex::new(State {
                    config,
                    tick: 0,
                    live: 0,
                    kinds: HashMap::new(),
                }),
                ready: Condvar::new(),
            }),
        }
    }

    /// The current limits.
    pub fn config(&self) -> CacheConfig {
        self.shared.state.lock().config
    }

    /// Change the limits; shrinking the capacity evicts at once.
    pub fn configure(&self, config: CacheConfig) {
        let mut evicted = Vec::new();
        {
            let mut state = self.shared.state.lock();
            state.config = config;
            state.evict_to_capacity(&mut evicted);
        }
        drop(evicted);
    }

    /// The value for `(kind, key)`: a live entry's (a hit), or the result of
    /// `compile` (a miss), which is then cached. An error from `compile` is
    /// returned and nothing is cached. `owner` ties the entry to an
    /// [`OwnerToken`]; `None` pins it until evicted.
    pub fn get_or_compile<E>(
        &self,
        kind: &str,
        key: &Key,
        owner: Option<&OwnerToken>,
        compile: impl FnOnce() -> Result<V, E>,
    ) -> Result<(V, Outcome), E> {
        let digest = Digest(*key.digest());
        let mut state = self.shared.state.lock();
        loop {
            let tick = state.next_tick();
            let Some(table) = state.kinds.get_mut(kind) else {
                break;
            };
            match table.slots.get_mut(&digest) {
                Some(Slot::Ready(entry)) => {
                    entry.last_used = tick;
                    match (owner, &mut entry.owners) {
                        (None, owners) => *owners = None,
                        (Some(token), Some(owners)) if !owners.contains(&token.id()) => {
                            owners.push(token.id());
                            token.register(self.shared.id, self.weak());
                        }
                        _ => {}
                    }
                    let value = entry.value.clone();
                    table.stats.hits += 1;
                    return Ok((value, Outcome::Hit));
                }
                Some(Slot::Pending) => self.shared.ready.wait(&mut state),
                None => break,
            }
        }

        // A miss: claim the key, then compile without the lock.
        let table = state.table(kind);
        table.stats.misses += 1;
        table.slots.insert(digest, Slot::Pending);
        let gone = table.gone.get(&digest).copied();
        let candidates: Vec<(Key, u64)> = match gone {
            Some(_) => Vec::new(),
            None => table
                .ready()
                .map(|e| (e.key.clone(), e.last_used))
                .collect(),
        };
        drop(state);
        let mut pending = PendingGuard {
            shared: &self.shared,
            kind,
            digest,
            armed: true,
        };

        let mut explanation = explain_against(kind, key, gone, &candidates);
        if switches::log_compiles() {
            tracing::info!(target: "nitro_cache", kind, key = %key, "compiling {explanation}");
        } else {
            tracing::debug!(target: "nitro_cache", kind, key = %key, "compiling {explanation}");
        }

        let started = Instant::now();
        let result = compile();
        let elapsed = started.elapsed();

        let mut evicted = Vec::new();
        let mut pileup_keys = None;
        let mut state = self.shared.state.lock();
        pending.armed = false;
        let tick = state.next_tick();
        let threshold = state.config.pileup_threshold;
        let table = state.table(kind);
        table.stats.compile_time += elapsed;
        let value = match result {
            Ok(value) => value,
            Err(error) => {
                table.stats.failed_compiles += 1;
                table.slots.remove(&digest);
                drop(state);
                self.shared.ready.notify_all();
                return Err(error);
            }
        };
        table.stats.compiles += 1;
        table.stats.live += 1;
        table.gone.remove(&digest);
        table.slots.insert(
            digest,
            Slot::Ready(Entry {
                value: value.clone(),
                key: key.clone(),
                last_used: tick,
                owners: owner.map(|token| vec![token.id()]),
            }),
        );
        if table.stats.live > threshold && !table.stats.pileup_warned {
            table.stats.pileup_warned = true;
            let mut live: Vec<(u64, Key)> = table
                .ready()
                .map(|e| (e.last_used, e.key.clone()))
                .collect();
            live.sort_by_key(|(tick, _)| *tick);
            pileup_keys = Some(live.into_iter().map(|(_, key)| key).collect::<Vec<_>>());
        }
        if let Some(token) = owner {
            token.register(self.shared.id, self.weak());
        }
        state.live += 1;
        state.evict_to_capacity(&mut evicted);
        drop(state);
        self.shared.ready.notify_all();
        drop(evicted);

        if let Some(keys) = pileup_keys {
            let message = pileup::message(kind, threshold, &keys);
            tracing::warn!(target: "nitro_cache", kind, "{message}");
            explanation.warning = Some(message);
        }
        Ok((value, Outcome::Miss(explanation)))
    }

    /// Why a lookup of `(kind, key)` would compile now: the parts that differ
    /// from the nearest live entry of the same kind (or that it is live).
    pub fn explain_miss(&self, kind: &str, key: &Key) -> Explanation {
        let digest = Digest(*key.digest());
        let (live, gone, candidates) = {
            let state = self.shared.state.lock();
            match state.kinds.get(kind) {
                None => (false, None, Vec::new()),
                Some(table) => (
                    matches!(table.slots.get(&digest), Some(Slot::Ready(_))),
                    table.gone.get(&digest).copied(),
                    table
                        .ready()
                        .map(|e| (e.key.clone(), e.last_used))
                        .collect(),
                ),
            }
        };
        if live {
            return Explanation {
                kind: kind.to_owned(),
                key: key.to_string(),
                reason: Reason::Live,
                warning: None,
            };
        }
        explain_against(kind, key, gone, &candidates)
    }

    /// The counters of one program kind (all zero if it was never used).
    pub fn stats(&self, kind: &str) -> Stats {
        let state = self.shared.state.lock();
        state.kinds.get(kind).map(|t| t.stats).unwrap_or_default()
    }

    /// The counters of every kind used so far, by kind.
    pub fn stats_all(&self) -> BTreeMap<String, Stats> {
        let state = self.shared.state.lock();
        state
            .kinds
            .iter()
            .map(|(kind, table)| (kind.clone(), table.stats))
            .collect()
    }

    /// Live entries across all kinds.
    pub fn len(&self) -> usize {
        self.shared.state.lock().live
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop every live entry (counters are kept; this is not an eviction).
    pub fn clear(&self) {
        let mut dropped = Vec::new();
        {
            let mut state = self.shared.state.lock();
            for table in state.kinds.values_mut() {
                for (digest, slot) in std::mem::take(&mut table.slots) {
                    match slot {
                        Slot::Pending => {
                            table.slots.insert(digest, Slot::Pending);
                        }
                        Slot::Ready(entry) => dropped.push(entry.value),
                    }
                }
                table.stats.live = 0;
                table.gone.clear();
            }
            state.live = 0;
        }
        drop(dropped);
    }

    fn weak(&self) -> Weak<dyn ReleaseOwner> {
        let weak: Weak<Shared<V>> = Arc::downgrade(&self.shared);
        weak
    }
}

/// Explain a miss of `key` against the live keys of its kind.
fn explain_against(
    kind: &str,
    key: &Key,
    gone: Option<GoneCause>,
    candidates: &[(Key, u64)],
) -> Explanation {
    let reason = if let Some(cause) = gone {
        Reason::Gone(cause)
    } else {
        candidates
            .iter()
            .map(|(k, tick)| (explain::distance(k, key), std::cmp::Reverse(*tick), k))
            .min_by_key(|(d, tick, _)| (*d, *tick))
            .map(|(_, _, nearest)| Reason::Differs {
                nearest: nearest.to_string(),
                changes: explain::diff_keys(nearest, key),
            })
            .unwrap_or(Reason::FirstOfKind)
    };
    Explanation {
        kind: kind.to_owned(),
        key: key.to_string(),
        reason,
        warning: None,
    }
}

/// Removes a claimed key if its compile never finished (the closure
/// panicked), so waiting threads retry instead of waiting forever.
struct PendingGuard<'a, V> {
    shared: &'a Shared<V>,
    kind: &'a str,
    digest: Digest,
    armed: bool,
}

impl<V> Drop for PendingGuard<'_, V> {
    fn drop(&mut self) {
        if self.armed {
            let mut state = self.shared.state.lock();
            if let Some(table) = state.kinds.get_mut(self.kind) {
                if matches!(table.slots.get(&self.digest), Some(Slot::Pending)) {
                    table.slots.remove(&self.digest);
                    table.stats.failed_compiles += 1;
                }
            }
            drop(state);
            self.shared.ready.notify_all();
        }
    }
}
