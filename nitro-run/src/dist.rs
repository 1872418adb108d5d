//! The process group a run trains in: [`Distributed`], the handle
//! `build_data` receives, and the few host collectives nitro-run makes
//! itself (metric sums, the resume path, barriers).
//!
//! **Owns:** joining the group once per process (nitro-device's
//! [`ProcessGroup::from_env`]: the MPI world under `mpirun -n N`, a world
//! of one otherwise), finalising MPI at process exit, the data-parallel
//! shard arithmetic ([`Distributed::shard`]), and the reductions of host
//! sums and counts. **Does not own:** the transport and its fixed order
//! (nitro-device's `collective`), the gradient all-reduce (an op in the
//! compiled train step: `train_step`).
//!
//! A world of one is exactly today's run: no all-reduce op in any program,
//! every collective here the identity, nothing extra on the step path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nitro_device::collective::{
    Backend, CollectiveError, Communicator, Launch, ProcessGroup, Staged,
};
use nitro_graph::HostBuffer;

use crate::error::{Result, RunError};
use crate::metric::Totals;

/// The distribution handle: this process's rank, the world size, its rank
/// on its host, the transport, and the communicator to the other ranks.
///
/// Every handle of one process shares one group (MPI is joined once);
/// a process started without a launcher is a world of one.
#[derive(Clone, Debug)]
pub struct Distributed {
    group: ProcessGroup,
    /// The communicator programs run with: the group's, timed.
    timed: Arc<Timed>,
}

/// A communicator that adds up the time spent in its all-reduces (the
/// figure [`crate::TrainReport::all_reduce_time`] reports): two clock
/// reads per call, one call per update.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn Communicator>,
    nanos: AtomicU64,
}

impl Communicator for Timed {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> std::result::Result<(), CollectiveError> {
        self.timed(|| self.inner.all_reduce_sum(buf))
    }
    // Every call is forwarded, not left to the trait's defaults: those
    // would turn the group's one-copy paths back into concatenate-and-copy.
    fn all_reduce_sum_parts(
        &self,
        parts: &[&[u8]],
        buf: &mut HostBuffer,
    ) -> std::result::Result<(), CollectiveError> {
        self.timed(|| self.inner.all_reduce_sum_parts(parts, buf))
    }
    fn stage(
        &self,
        dtype: nitro_graph::DType,
        len: usize,
    ) -> std::result::Result<Option<Staged>, CollectiveError> {
        self.inner.stage(dtype, len)
    }
    fn all_reduce_sum_staged(
        &self,
        staged: Staged,
        buf: &mut HostBuffer,
    ) -> std::result::Result<(), CollectiveError> {
        self.timed(|| self.inner.all_reduce_sum_staged(staged, buf))
    }
    fn broadcast(
        &self,
        buf: &mut HostBuffer,
        root: usize,
    ) -> std::result::Result<(), CollectiveError> {
        self.inner.broadcast(buf, root)
    }
    fn barrier(&self) -> std::result::Result<(), CollectiveError> {
        self.inner.barrier()
    }
}

impl Timed {
    fn timed<T>(&self, call: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = call();
        self.nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}

/// The process's group once joined (or why joining failed), kept so a
/// second handle joins nothing; taken at exit so MPI is finalised.
static WORLD: Mutex<Option<std::result::Result<ProcessGroup, CollectiveError>>> = Mutex::new(None);

extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::os::raw::c_int;
}

/// Drops the process's clone of the group at exit: when no handle outlives
/// `main`, that is the last clone, and MPI is finalised (Open MPI fails a
/// job whose ranks exit without finalising).
extern "C" fn release_world() {
    if let Ok(mut world) = WORLD.try_lock() {
        world.take();
    }
}

fn collective(op: &'static str) -> impl Fn(CollectiveError) -> RunError {
    move |source| RunError::Collective {
        op,
        source: Box::new(source),
    }
}

impl Distributed {
    /// The group this process was launched into (joined on first use).
    pub fn current() -> Result<Distributed> {
        let mut world = WORLD.lock().unwrap_or_else(|p| p.into_inner());
        if world.is_none() {
            let joined = ProcessGroup::from_env();
            if matches!(&joined, Ok(g) if g.world_size() > 1) {
                // SAFETY: registers a plain function with the C runtime.
                unsafe { atexit(release_world) };
            }
            *world = Some(joined);
        }
        match world.as_ref().expect("joined above") {
            Ok(group) => Ok(Distributed::from_group(group.clone())),
            Err(e) => Err(collective("join")(e.clone())),
        }
    }

    /// A world of one (no MPI), whatever the environment says.
    pub fn single() -> Distributed {
        Distributed::from_group(ProcessGroup::single())
    }

    /// A handle over an existing group (a test double, a custom backend).
    pub fn from_group(group: ProcessGroup) -> Distributed {
        let timed = Arc::new(Timed {
            inner: group.communicator().clone(),
            nanos: AtomicU64::new(0),
        });
        Distributed { group, timed }
    }

    /// Time spent so far in the all-reduces of this handle's programs
    /// (waiting for the slowest rank included).
    pub fn all_reduce_time(&self) -> Duration {
        Duration::from_nanos(self.timed.nanos.load(Ordering::Relaxed))
    }

    /// What the environment announces, without joining anything: for
    /// `show-config`, which builds no handle.
    pub fn describe_env() -> String {
        match Launch::from_env() {
            Ok(None) => "world 1 (single process)".into(),
            Ok(Some(l)) => format!(
                "world {} (rank {}, local {}, launched by {})",
                l.world_size,
                l.rank,
                l.local_rank.map_or("?".into(), |r| r.to_string()),
                l.launcher
            ),
            Err(e) => format!("world unknown: {e}"),
        }
    }

    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    /// Processes in the job.
    pub fn world_size(&self) -> usize {
        self.group.world_size()
    }

    /// This process's rank on its host (the GPU it takes).
    pub fn local_rank(&self) -> usize {
        self.group.local_rank()
    }

    /// The transport.
    pub fn backend(&self) -> Backend {
        self.group.backend()
    }

    /// Rank 0: the one that writes checkpoints, logs, plots and progress.
    pub fn is_root(&self) -> bool {
        self.group.is_root()
    }

    /// The process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The communicator compiled programs run with, `None` in a world of
    /// one (its programs hold no all-reduce).
    pub(crate) fn communicator(&self) -> Option<Arc<dyn Communicator>> {
        (self.world_size() > 1).then(|| self.timed.clone() as Arc<dyn Communicator>)
    }

    /// This rank's rows of a global batch: rank `r` of `N` with micro-batch
    /// `b` takes rows `r·b .. (r+1)·b` of each global batch of `N·b`, i.e.
    /// `perm[s·N·b + r·b .. s·N·b + (r+1)·b]` of the epoch's permutation.
    pub(crate) fn shard(&self, micro: usize) -> std::ops::Range<usize> {
        let start = self.rank() * micro;
        start..start + micro
    }

    /// Element-wise sums over the ranks, in rank order (bitwise equal on
    /// every rank); the identity in a world of one.
    pub(crate) fn sum_f64(&self, op: &'static str, values: &mut [f64]) -> Result<()> {
        if self.world_size() == 1 || values.is_empty() {
            return Ok(());
        }
        let mut buf = HostBuffer::F64(values.to_vec());
        self.group
            .all_reduce_sum(&mut buf)
            .map_err(collective(op))?;
        let HostBuffer::F64(sum) = buf else {
            unreachable!("a collective keeps the dtype")
        };
        values.copy_from_slice(&sum);
        Ok(())
    }

    /// Replaces `totals` by its sums and counts over every rank, entry by
    /// entry for `names` (in that order, the same on every rank): a mean
    /// over a sharded set is then exact, however many padded rows each
    /// rank's last chunk had. The identity in a world of one.
    pub(crate) fn reduce_totals(
        &self,
        op: &'static str,
        totals: &mut Totals,
        names: &[&str],
    ) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let mut flat: Vec<f64> = names
            .iter()
            .flat_map(|n| {
                let (s, c) = totals.entries().get(*n).copied().unwrap_or((0.0, 0.0));
                [s, c]
            })
            .collect();
        self.sum_f64(op, &mut flat)?;
        *totals = Totals::from_entries(
            names
                .iter()
                .zip(flat.chunks(2))
                .map(|(n, sc)| (n.to_string(), (sc[0], sc[1])))
                .collect(),
        );
        Ok(())
    }

    /// Whether `flag` is set on any rank: a Ctrl-C reaches the ranks at
    /// different steps, and all must stop after the same one (else the
    /// others wait in an all-reduce the stopped one never joins). One
    /// 8-byte reduction per update in a data-parallel job; free alone.
    pub(crate) fn any(&self, op: &'static str, flag: bool) -> Result<bool> {
        if self.world_size() == 1 {
            return Ok(flag);
        }
        let mut v = [f64::from(u8::from(flag))];
        self.sum_f64(op, &mut v)?;
        Ok(v[0] > 0.0)
    }

    /// Waits for every rank.
    pub(crate) fn barrier(&self, op: &'static str) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        self.group.barrier().map_err(collective(op))
    }

    /// Rank 0's text on every rank (its length, then its bytes).
    pub(crate) fn broadcast_text(&self, op: &'static str, text: &str) -> Result<String> {
        if self.world_size() == 1 {
            return Ok(text.to_string());
        }
        let mut len = HostBuffer::I64(vec![text.len() as i64]);
        self.group.broadcast(&mut len, 0).map_err(collective(op))?;
        let HostBuffer::I64(len) = len else {
            unreachable!("a collective keeps the dtype")
        };
        let mut bytes = text.as_bytes().to_vec();
        bytes.resize(len[0].max(0) as usize, 0);
        let mut buf = HostBuffer::U8(bytes);
        self.group.broadcast(&mut buf, 0).map_err(collective(op))?;
        let HostBuffer::U8(bytes) = buf else {
            unreachable!("a collective keeps the dtype")
        };
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

impl std::fmt::Display for Distributed {
    /// `world 2 (rank 0, local 0, mpi)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.world_size() == 1 {
            return write!(f, "world 1 (single process)");
        }
        write!(
            f,
            "world {} (rank {}, local {}, {})",
            self.world_size(),
            self.rank(),
            self.local_rank(),
            self.backend()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_of_one_reduces_to_the_identity_and_shards_everything() {
        let d = Distributed::single();
        assert_eq!(d.to_string(), "world 1 (single process)");
        assert!(d.is_root() && d.communicator().is_none());
        assert_eq!(d.shard(8), 0..8);
        let mut v = [1.5, -0.0];
        d.sum_f64("test", &mut v).unwrap();
        assert_eq!(v[0], 1.5);
        assert!(v[1].is_sign_negative());
        assert_eq!(d.broadcast_text("test", "run/ckpt").unwrap(), "run/ckpt");
        d.barrier("test").unwrap();
    }

    /// A group that stages: what the timing wrapper must pass through.
    #[derive(Debug, Default)]
    struct Stages {
        calls: std::sync::Mutex<Vec<&'static str>>,
    }

    impl Communicator for Stages {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            2
        }
        fn backend(&self) -> Backend {
            Backend::Mpi
        }
        fn all_reduce_sum(&self, _: &mut HostBuffer) -> std::result::Result<(), CollectiveError> {
            self.calls.lock().unwrap().push("all_reduce_sum");
            Ok(())
        }
        fn all_reduce_sum_parts(
            &self,
            _: &[&[u8]],
            _: &mut HostBuffer,
        ) -> std::result::Result<(), CollectiveError> {
            self.calls.lock().unwrap().push("parts");
            Ok(())
        }
        fn stage(
            &self,
            _: nitro_graph::DType,
            _: usize,
        ) -> std::result::Result<Option<Staged>, CollectiveError> {
            self.calls.lock().unwrap().push("stage");
            // SAFETY: zero bytes: nothing is ever written there.
            Ok(Some(unsafe { Staged::new(std::ptr::null_mut(), 0, 7) }))
        }
        fn all_reduce_sum_staged(
            &self,
            staged: Staged,
            _: &mut HostBuffer,
        ) -> std::result::Result<(), CollectiveError> {
            assert_eq!(staged.call(), 7);
            self.calls.lock().unwrap().push("staged");
            Ok(())
        }
        fn broadcast(
            &self,
            _: &mut HostBuffer,
            _: usize,
        ) -> std::result::Result<(), CollectiveError> {
            Ok(())
        }
        fn barrier(&self) -> std::result::Result<(), CollectiveError> {
            Ok(())
        }
    }

    #[test]
    fn the_timed_communicator_passes_every_path_through() {
        // The trait's defaults would turn a staged or parts all-reduce into
        // concatenate-and-copy behind the group's back.
        let inner = Arc::new(Stages::default());
        let timed = Timed {
            inner: inner.clone(),
            nanos: AtomicU64::new(0),
        };
        let mut buf = HostBuffer::F32(vec![]);
        timed.all_reduce_sum_parts(&[], &mut buf).unwrap();
        let staged = timed.stage(nitro_graph::DType::F32, 0).unwrap().unwrap();
        timed.all_reduce_sum_staged(staged, &mut buf).unwrap();
        timed.all_reduce_sum(&mut buf).unwrap();
        assert_eq!(
            *inner.calls.lock().unwrap(),
            ["parts", "stage", "staged", "all_reduce_sum"]
        );
    }

    #[test]
    fn a_process_without_a_launcher_joins_a_world_of_one() {
        if Launch::from_env().ok().flatten().is_some() {
            return; // launched by mpirun: not this test's subject
        }
        let d = Distributed::current().unwrap();
        assert_eq!((d.world_size(), d.rank()), (1, 0));
        assert_eq!(Distributed::describe_env(), "world 1 (single process)");
    }
}
