//! The all-reduce primitive: traced, printed, hashed, refused by autodiff,
//! checked against the world it runs in, and executed by the CPU backend
//! through the communicator handed to each call. The communicators here are
//! in-process doubles that stand for the other ranks; the real MPI one is
//! exercised by nitro-device's `mpi_ranks` tests.

use nitro_device::collective::{Backend, CollectiveError, Communicator, SingleProcess};
use nitro_graph::{
    compile, trace, Array, CompileOptions, DType, GraphError, HostBuffer, TensorSpec,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Rank 0 of a world of `world` whose other ranks all hold `other`: the
/// sum is `mine + other + other ...` in rank order, as the MPI group adds.
#[derive(Debug)]
struct OtherRanksHold {
    world: usize,
    other: f32,
    calls: AtomicUsize,
}

impl Communicator for OtherRanksHold {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let HostBuffer::F32(v) = buf else {
            panic!("the test feeds f32")
        };
        for x in v.iter_mut() {
            for _ in 1..self.world {
                *x += self.other;
            }
        }
        Ok(())
    }
    fn broadcast(&self, _: &mut HostBuffer, _: usize) -> Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

/// Rank 0 of two whose peer holds 1.0 everywhere, answering in a new
/// allocation: the program must read the sum where the communicator left it.
#[derive(Debug)]
struct Reallocates;

impl Communicator for Reallocates {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
        let HostBuffer::F32(v) = buf else {
            panic!("the test feeds f32")
        };
        *buf = HostBuffer::F32(v.iter().map(|x| x + 1.0).collect());
        Ok(())
    }
    fn broadcast(&self, _: &mut HostBuffer, _: usize) -> Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

/// A group whose rank 1 never answers.
#[derive(Debug)]
struct LostPeer;

impl Communicator for LostPeer {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn backend(&self) -> Backend {
        Backend::Mpi
    }
    fn all_reduce_sum(&self, _: &mut HostBuffer) -> Result<(), CollectiveError> {
        Err(CollectiveError::LostRanks {
            rank: 0,
            op: "all_reduce_sum",
            lost: vec![1],
            waited: Duration::from_secs(20),
        })
    }
    fn broadcast(&self, _: &mut HostBuffer, _: usize) -> Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

fn sum_program(world: usize, shape: &[usize]) -> nitro_graph::Program {
    compile(
        &[("g", TensorSpec::f32(shape))],
        CompileOptions::named("sum"),
        |_, t| Ok(vec![("s".into(), t[0].all_reduce_sum(world))]),
    )
    .unwrap()
}

#[test]
fn printed_with_its_world_and_hashed_by_it() {
    let specs = [("g", TensorSpec::f32(&[3]))];
    let graph = |world: Option<usize>| {
        trace(&specs, |_, t| {
            let y = t[0].exp();
            Ok(vec![(
                "y".into(),
                world.map_or(y.clone(), |w| y.all_reduce_sum(w)),
            )])
        })
        .unwrap()
    };
    let text = graph(Some(2)).to_string();
    assert!(text.contains("all_reduce_sum world_size=2"), "{text}");
    let hashes =
        [graph(None), graph(Some(1)), graph(Some(2)), graph(Some(3))].map(|g| g.content_hash());
    for i in 0..4 {
        for j in 0..i {
            assert_ne!(hashes[i], hashes[j], "graphs {i} and {j} share a key");
        }
    }
}

#[test]
fn a_world_of_one_is_the_identity_alone_or_in_a_group_of_one() {
    let p = sum_program(1, &[4]);
    let x = Array::from_vec(&[4], vec![1.5f32, -0.0, f32::MAX, 3.25]).unwrap();
    let alone = p.run(&mut [x.clone()]).unwrap();
    let grouped = p.run_with(&mut [x.clone()], &SingleProcess).unwrap();
    assert_eq!(p.desc().world_size(), Some(1));
    for out in [&alone[0], &grouped[0]] {
        let bits: Vec<u32> = out
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let want: Vec<u32> = x
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(bits, want);
    }
}

#[test]
fn the_call_s_communicator_sums_and_constants_are_not_folded_away() {
    // Inputs, a constant and a value computed from both: if a pass folded
    // the all-reduce of the constant, it would come out 2, not 2 * world.
    let world = 3;
    let p = compile(
        &[("g", TensorSpec::f32(&[2]))],
        CompileOptions::named("step"),
        |_, t| {
            let two = t[0].full_like(2.0);
            Ok(vec![
                ("g".into(), (&t[0] * 2.0).all_reduce_sum(world)),
                ("c".into(), two.all_reduce_sum(world)),
            ])
        },
    )
    .unwrap();
    let comm = OtherRanksHold {
        world,
        other: 0.5,
        calls: AtomicUsize::new(0),
    };
    let out = p
        .run_with(
            &mut [Array::from_vec(&[2], vec![1.0f32, -4.0]).unwrap()],
            &comm,
        )
        .unwrap();
    // Rank order: rank 0's value, then 0.5 from each other rank.
    assert_eq!(
        out[0].as_slice::<f32>().unwrap(),
        &[2.0 + 0.5 + 0.5, -8.0 + 0.5 + 0.5]
    );
    assert_eq!(out[1].as_slice::<f32>().unwrap(), &[3.0, 3.0]);
    assert!(comm.calls.load(Ordering::SeqCst) >= 2);
    // A second call reuses the program with whatever group it is given.
    let again = OtherRanksHold {
        world,
        other: 1.0,
        calls: AtomicUsize::new(0),
    };
    let out = p
        .run_with(
            &mut [Array::from_vec(&[2], vec![0.0f32, 0.0]).unwrap()],
            &again,
        )
        .unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[2.0, 2.0]);
}

#[test]
fn a_large_program_reduces_on_a_worker_thread_too() {
    // Large enough that `Program::run` moves it onto a rayon worker.
    let n = 200_000;
    let p = sum_program(2, &[n]);
    let comm = OtherRanksHold {
        world: 2,
        other: 1.0,
        calls: AtomicUsize::new(0),
    };
    let x = Array::from_vec(&[n], vec![0.25f32; n]).unwrap();
    let out = p.run_with(&mut [x], &comm).unwrap();
    assert!(out[0].as_slice::<f32>().unwrap().iter().all(|&v| v == 1.25));
}

#[test]
fn the_wrong_world_is_refused_before_running() {
    let p = sum_program(2, &[2]);
    let x = || Array::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
    let e = p.run(&mut [x()]).unwrap_err();
    assert!(
        matches!(e, GraphError::World { compiled: 2, .. })
            && e.to_string().contains("run alone")
            && e.to_string().contains("run_with"),
        "{e}"
    );
    let e = p.run_with(&mut [x()], &SingleProcess).unwrap_err();
    assert!(
        e.to_string().contains("in a group of 1") && e.to_string().contains("compile it again"),
        "{e}"
    );
    // A program without all-reduces runs in any group.
    let plain = compile(
        &[("g", TensorSpec::f32(&[2]))],
        CompileOptions::named("plain"),
        |_, t| Ok(vec![("y".into(), t[0].exp())]),
    )
    .unwrap();
    assert_eq!(plain.desc().world_size(), None);
    plain.run_with(&mut [x()], &LostPeer).unwrap();
}

#[test]
fn a_lost_rank_is_an_error_naming_program_and_rank() {
    let p = sum_program(2, &[2]);
    let e = p
        .run_with(
            &mut [Array::from_vec(&[2], vec![1.0f32, 2.0]).unwrap()],
            &LostPeer,
        )
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, GraphError::Collective { .. })
            && msg.contains("program `sum`")
            && msg.contains("lost rank 1"),
        "{msg}"
    );
}

#[test]
fn autodiff_refuses_it_and_gradients_can_be_reduced_after() {
    let specs = [("w", TensorSpec::f32(&[3]))];
    let err = trace(&specs, |tr, t| {
        let loss = t[0].all_reduce_sum(2).sum_all();
        let g = tr.grad(&loss, &[&t[0]])?;
        Ok(vec![("g".into(), g[0].clone())])
    })
    .unwrap_err();
    assert!(
        matches!(err, GraphError::Grad(_))
            && err.to_string().contains("all_reduce_sum")
            && err.to_string().contains("after `grad`"),
        "{err}"
    );
    let ok = trace(&specs, |tr, t| {
        let loss = (&t[0] * &t[0]).sum_all();
        let g = tr.grad(&loss, &[&t[0]])?;
        Ok(vec![("g".into(), g[0].all_reduce_sum(2))])
    });
    assert!(ok.is_ok(), "{:?}", ok.err());
}

#[test]
fn refused_dtypes_and_mixed_worlds() {
    let e = trace(&[("b", TensorSpec::new(DType::Bool, &[2]))], |_, t| {
        Ok(vec![("y".into(), t[0].all_reduce_sum(2))])
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("`all_reduce_sum`") && e.to_string().contains("bool"),
        "{e}"
    );
    let e = compile(
        &[("g", TensorSpec::f32(&[2]))],
        CompileOptions::named("mixed"),
        |_, t| {
            Ok(vec![
                ("a".into(), t[0].all_reduce_sum(2)),
                ("b".into(), t[0].exp().all_reduce_sum(3)),
            ])
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("over 2 and over 3 processes"), "{e}");
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_refuses_a_group_without_an_nccl_communicator_by_name() {
    let graph = trace(&[("g", TensorSpec::f32(&[2]))], |_, t| {
        Ok(vec![("s".into(), t[0].all_reduce_sum(2))])
    })
    .unwrap();
    // The source is generated (an all-reduce step); running it over two
    // processes without NCCL is refused before any device is touched.
    let p = nitro_graph::backend::cuda::CudaProgram::generate(graph, CompileOptions::named("sum"))
        .unwrap();
    assert!(
        p.listing().contains("nccl all-reduce sum"),
        "{}",
        p.listing()
    );
    let e = p
        .run(&mut [Array::new(&[2], vec![1.0f32, 2.0]).unwrap()])
        .unwrap_err();
    assert!(
        e.to_string().contains("all-reduce on CUDA needs NCCL"),
        "{e}"
    );
    assert!(e.to_string().contains("NcclCommunicator"), "{e}");
}

#[test]
fn pieces_cut_from_the_reduced_buffer_are_read_in_place_with_the_summed_values() {
    // A data-parallel update: two parameters' gradients flattened into one
    // buffer, all-reduced, cut back and applied. The cuts are contiguous
    // slices, read where they lie by the update loops: no slice kernel.
    let p = compile(
        &[
            ("a", TensorSpec::f32(&[3])),
            ("b", TensorSpec::f32(&[2, 2])),
        ],
        CompileOptions::named("update"),
        |_, t| {
            let (ga, gb) = (&t[0] * 2.0, t[1].exp());
            let flat = nitro_graph::Tensor::concat(&[ga, gb.reshape(&[4])], 0)?.all_reduce_sum(2);
            let a = &t[0] - &(flat.narrow(0, 0, 3) * 0.5);
            let b = &t[1] - &(flat.narrow(0, 3, 7).reshape(&[2, 2]) * 0.25);
            Ok(vec![("a".into(), a), ("b".into(), b)])
        },
    )
    .unwrap();
    let kernels = p.listing();
    let kernels = &kernels[kernels.find("\nkernels:").expect("a kernel list")..];
    assert!(!kernels.contains("slice ->"), "{kernels}");
    let comm = Reallocates;
    let (a0, b0) = ([1.0f32, -2.0, 0.5], [0.0f32, 1.0, -1.0, 2.0]);
    let out = p
        .run_with(
            &mut [
                Array::from_vec(&[3], a0.to_vec()).unwrap(),
                Array::from_vec(&[2, 2], b0.to_vec()).unwrap(),
            ],
            &comm,
        )
        .unwrap();
    // The other rank adds 1 to every gradient element.
    let want_a: Vec<f32> = a0.iter().map(|&x| x - (2.0 * x + 1.0) * 0.5).collect();
    let want_b: Vec<f32> = b0.iter().map(|&x| x - (x.exp() + 1.0) * 0.25).collect();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), want_a.as_slice());
    assert_eq!(out[1].as_slice::<f32>().unwrap(), want_b.as_slice());
}

#[test]
fn the_sum_takes_a_dying_argument_s_buffer_and_never_one_read_later() {
    use nitro_graph::ir::Op;
    use nitro_graph::plan::Storage;
    // The data-parallel shape: gradients flattened by a concat that only
    // the all-reduce reads. The sum is made in the concat's own buffer.
    let p = compile(
        &[("a", TensorSpec::f32(&[3])), ("b", TensorSpec::f32(&[2]))],
        CompileOptions::named("flat"),
        |_, t| {
            let flat = nitro_graph::Tensor::concat(&[&t[0] * 2.0, t[1].exp()], 0)?;
            Ok(vec![("s".into(), flat.all_reduce_sum(2))])
        },
    )
    .unwrap();
    let (graph, plan) = (p.desc().graph(), p.desc().plan());
    let sum = (0..graph.nodes.len())
        .find(|&n| matches!(graph.nodes[n].op, Op::AllReduceSum { .. }))
        .unwrap();
    let arg = graph.nodes[sum].args[0];
    assert!(matches!(plan.storage[sum], Storage::Slot(_)));
    assert_eq!(
        plan.storage[sum], plan.storage[arg],
        "the sum has a buffer of its own"
    );
    let comm = OtherRanksHold {
        world: 2,
        other: 1.0,
        calls: AtomicUsize::new(0),
    };
    let (a, b) = ([1.0f32, -2.0, 0.5], [0.0f32, 1.0]);
    let out = p
        .run_with(
            &mut [
                Array::from_vec(&[3], a.to_vec()).unwrap(),
                Array::from_vec(&[2], b.to_vec()).unwrap(),
            ],
            &comm,
        )
        .unwrap();
    let want: Vec<f32> = a
        .iter()
        .map(|&x| 2.0 * x + 1.0)
        .chain(b.iter().map(|&x| x.exp() + 1.0))
        .collect();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), want.as_slice());

    // An argument read after the sum keeps its own value: `s + x` and `x`
    // returned beside it see x, not the sum written over it.
    let p = compile(
        &[("g", TensorSpec::f32(&[4]))],
        CompileOptions::named("kept"),
        |_, t| {
            let x = &t[0] * 2.0;
            let s = x.all_reduce_sum(2);
            Ok(vec![("y".into(), &s + &x), ("x".into(), x)])
        },
    )
    .unwrap();
    let (graph, plan) = (p.desc().graph(), p.desc().plan());
    let sum = (0..graph.nodes.len())
        .find(|&n| matches!(graph.nodes[n].op, Op::AllReduceSum { .. }))
        .unwrap();
    assert_ne!(plan.storage[sum], plan.storage[graph.nodes[sum].args[0]]);
    let g = [1.0f32, -3.0, 0.25, 8.0];
    let out = p
        .run_with(&mut [Array::from_vec(&[4], g.to_vec()).unwrap()], &comm)
        .unwrap();
    let y: Vec<f32> = g.iter().map(|&v| (2.0 * v + 1.0) + 2.0 * v).collect();
    let x: Vec<f32> = g.iter().map(|&v| 2.0 * v).collect();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), y.as_slice());
    assert_eq!(out[1].as_slice::<f32>().unwrap(), x.as_slice());
    // Profiled in the group, the all-reduce is one of the kernels timed.
    let calls = comm.calls.load(Ordering::SeqCst);
    let rows = p
        .profile_with(&mut [Array::from_vec(&[4], g.to_vec()).unwrap()], &comm)
        .unwrap();
    assert!(
        rows.iter().any(|(_, k)| k.contains("all_reduce_sum")),
        "{rows:?}"
    );
    assert_eq!(comm.calls.load(Ordering::SeqCst), calls + 1);
}

/// What a peer holding 1.0 everywhere adds to this rank's f32 `buf`.
fn add_peer_ones(buf: &mut HostBuffer) -> Result<(), CollectiveError> {
    let HostBuffer::F32(v) = buf else {
        panic!("the test feeds f32")
    };
    v.iter_mut().for_each(|x| *x += 1.0);
    Ok(())
}

/// Rank 0 of two whose peer holds 1.0 everywhere, recording the parts a
/// concatenated all-reduce hands over.
#[derive(Debug, Default)]
struct SeesParts {
    parts: std::sync::Mutex<Vec<usize>>,
}

impl Communicator for SeesParts {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&self, _: &mut HostBuffer) -> Result<(), CollectiveError> {
        panic!("a flattening concat's all-reduce must come with its parts")
    }
    fn all_reduce_sum_parts(
        &self,
        parts: &[&[u8]],
        buf: &mut HostBuffer,
    ) -> Result<(), CollectiveError> {
        *self.parts.lock().unwrap() = parts.iter().map(|p| p.len()).collect();
        nitro_device::collective::concat_parts(parts, buf)?;
        add_peer_ones(buf)
    }
    fn broadcast(&self, _: &mut HostBuffer, _: usize) -> Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

#[test]
fn a_flattening_concat_hands_its_parts_to_the_communicator() {
    // The data-parallel shape: the concat that only the all-reduce reads is
    // not run on its own; its parts reach the communicator, which copies
    // them where it reduces (MPI's shared window) instead.
    let p = compile(
        &[("a", TensorSpec::f32(&[3])), ("b", TensorSpec::f32(&[2]))],
        CompileOptions::named("flat"),
        |_, t| {
            let flat = nitro_graph::Tensor::concat(&[&t[0] * 2.0, t[1].exp()], 0)?;
            Ok(vec![("s".into(), &flat.all_reduce_sum(2) * 3.0)])
        },
    )
    .unwrap();
    assert!(
        p.listing().contains("(written by the all-reduce)"),
        "{}",
        p.listing()
    );
    let (a, b) = ([1.0f32, -2.0, 0.5], [0.0f32, 1.0]);
    let inputs = || {
        [
            Array::from_vec(&[3], a.to_vec()).unwrap(),
            Array::from_vec(&[2], b.to_vec()).unwrap(),
        ]
    };
    let local: Vec<f32> = a
        .iter()
        .map(|&x| 2.0 * x)
        .chain(b.iter().map(|&x| x.exp()))
        .collect();
    let comm = SeesParts::default();
    let out = p.run_with(&mut inputs(), &comm).unwrap();
    assert_eq!(*comm.parts.lock().unwrap(), vec![12, 8]);
    let want: Vec<f32> = local.iter().map(|&x| (x + 1.0) * 3.0).collect();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), want.as_slice());
    // Alone (a world of one is refused for world_size 2): compiled for one
    // rank, the folded concat still writes every part in order.
    let p = compile(
        &[("a", TensorSpec::f32(&[3])), ("b", TensorSpec::f32(&[2]))],
        CompileOptions::named("flat1"),
        |_, t| {
            let flat = nitro_graph::Tensor::concat(&[&t[0] * 2.0, t[1].exp()], 0)?;
            Ok(vec![("s".into(), &flat.all_reduce_sum(1) * 3.0)])
        },
    )
    .unwrap();
    let out = p.run(&mut inputs()).unwrap();
    let want: Vec<f32> = local.iter().map(|&x| x * 3.0).collect();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), want.as_slice());
}

/// Rank 0 of two whose peer holds 1.0 everywhere, offering memory of its
/// own for the contribution (as MPI's shared window does): the program
/// must compute its parts straight into it.
#[derive(Debug, Default)]
struct OffersMemory {
    memory: std::sync::Mutex<Vec<f32>>,
    staged: AtomicUsize,
}

impl Communicator for OffersMemory {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
        add_peer_ones(buf)
    }
    fn stage(
        &self,
        dtype: DType,
        len: usize,
    ) -> Result<Option<nitro_device::collective::Staged>, CollectiveError> {
        assert_eq!(dtype, DType::F32);
        let mut memory = self.memory.lock().unwrap();
        // Poisoned, so that a part not computed into it shows.
        *memory = vec![f32::NAN; len];
        self.staged.fetch_add(1, Ordering::SeqCst);
        let n = self.staged.load(Ordering::SeqCst) as u64;
        // SAFETY: the vector lives in `self` and is not touched until the
        // staged all-reduce reads it.
        Ok(Some(unsafe {
            nitro_device::collective::Staged::new(memory.as_mut_ptr().cast(), len * 4, n)
        }))
    }
    fn all_reduce_sum_staged(
        &self,
        staged: nitro_device::collective::Staged,
        buf: &mut HostBuffer,
    ) -> Result<(), CollectiveError> {
        assert_eq!(staged.call(), self.staged.load(Ordering::SeqCst) as u64);
        *buf = HostBuffer::F32(self.memory.lock().unwrap().clone());
        add_peer_ones(buf)
    }
    fn broadcast(&self, _: &mut HostBuffer, _: usize) -> Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

#[test]
fn gradients_are_computed_straight_into_memory_the_communicator_offers() {
    // Each part is a value only the flattening concat reads: its kernel
    // writes it into the communicator's memory, and nothing is copied.
    let p = compile(
        &[
            ("a", TensorSpec::f32(&[3])),
            ("b", TensorSpec::f32(&[2, 2])),
        ],
        CompileOptions::named("staged"),
        |_, t| {
            let ga = &t[0] * 2.0;
            let gb = t[1].exp().reshape(&[4]);
            let flat = nitro_graph::Tensor::concat(&[ga, gb], 0)?.all_reduce_sum(2);
            let a = &t[0] - &(flat.narrow(0, 0, 3) * 0.5);
            let b = &t[1] - &(flat.narrow(0, 3, 7).reshape(&[2, 2]) * 0.25);
            Ok(vec![("a".into(), a), ("b".into(), b)])
        },
    )
    .unwrap();
    let (a0, b0) = ([1.0f32, -2.0, 0.5], [0.0f32, 1.0, -1.0, 2.0]);
    let comm = OffersMemory::default();
    for call in 1..=2 {
        let out = p
            .run_with(
                &mut [
                    Array::from_vec(&[3], a0.to_vec()).unwrap(),
                    Array::from_vec(&[2, 2], b0.to_vec()).unwrap(),
                ],
                &comm,
            )
            .unwrap();
        assert_eq!(comm.staged.load(Ordering::SeqCst), call);
        let local: Vec<f32> = a0
            .iter()
            .map(|&x| 2.0 * x)
            .chain(b0.iter().map(|&x| x.exp()))
            .collect();
        assert_eq!(
            *comm.memory.lock().unwrap(),
            local,
            "parts not computed in place"
        );
        let want_a: Vec<f32> = a0.iter().map(|&x| x - (2.0 * x + 1.0) * 0.5).collect();
        let want_b: Vec<f32> = b0.iter().map(|&x| x - (x.exp() + 1.0) * 0.25).collect();
        assert_eq!(out[0].as_slice::<f32>().unwrap(), want_a.as_slice());
        assert_eq!(out[1].as_slice::<f32>().unwrap(), want_b.as_slice());
    }
}

#[test]
fn a_flat_all_reduce_after_another_one_is_not_staged() {
    // Staging happens before the call's first kernel; with another
    // collective first, the staged memory would be that one's to use, so
    // the flat buffer's parts are handed over instead.
    let p = compile(
        &[("a", TensorSpec::f32(&[3])), ("b", TensorSpec::f32(&[2]))],
        CompileOptions::named("two"),
        |_, t| {
            let scale = t[1].all_reduce_sum(2);
            let flat = nitro_graph::Tensor::concat(&[&t[0] * 2.0, t[1].exp()], 0)?;
            Ok(vec![
                ("s".into(), flat.all_reduce_sum(2)),
                ("scale".into(), scale),
            ])
        },
    )
    .unwrap();
    let comm = OffersMemory::default();
    let (a, b) = ([1.0f32, -2.0, 0.5], [0.0f32, 1.0]);
    let out = p
        .run_with(
            &mut [
                Array::from_vec(&[3], a.to_vec()).unwrap(),
                Array::from_vec(&[2], b.to_vec()).unwrap(),
            ],
            &comm,
        )
        .unwrap();
    assert_eq!(comm.staged.load(Ordering::SeqCst), 0);
    let want: Vec<f32> = a
        .iter()
        .map(|&x| 2.0 * x + 1.0)
        .chain(b.iter().map(|&x| x.exp() + 1.0))
        .collect();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), want.as_slice());
    assert_eq!(out[1].as_slice::<f32>().unwrap(), &[1.0, 2.0]);
}
