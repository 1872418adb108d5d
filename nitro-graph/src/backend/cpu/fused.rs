//! Fused elementwise kernels: a group of elementwise nodes compiled to a
//! short list of register instructions, evaluated over chunks of
//! [`CHUNK`] elements. Each instruction is a tight loop over one chunk
//! (vectorisable by the compiler), and the chunk's temporaries stay in L1:
//! the group never writes an intermediate to memory. Large groups split
//! their index range over rayon tasks.

use super::raw::Raw;
use crate::fusion::{Access, FusedGroup, Source};
use crate::ir::{BinaryOp, CmpOp, Graph, NodeId, Op, UnaryOp};
use crate::semantics as sem;
use crate::{each_compare, each_float_binary, each_float_unary, each_int_binary, each_int_unary};
use nitro_device::{bf16, f16, DType};
use rayon::prelude::*;
use std::collections::HashMap;

/// Elements per chunk: small enough that a dozen f32 registers fit in L1.
pub const CHUNK: usize = 256;
/// Elements per parallel task.
const TASK: usize = 16 * 1024;

/// Register classes: storage types compute in their wider class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    F32,
    F64,
    I32,
    I64,
    Bool,
}

fn class_of(d: DType) -> Class {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => Class::F32,
        DType::F64 => Class::F64,
        DType::I32 | DType::U8 => Class::I32,
        DType::I64 => Class::I64,
        DType::Bool => Class::Bool,
    }
}

/// A chunk-sized register.
enum Reg {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

impl Reg {
    fn new(c: Class) -> Reg {
        match c {
            Class::F32 => Reg::F32(vec![0.0; CHUNK]),
            Class::F64 => Reg::F64(vec![0.0; CHUNK]),
            Class::I32 => Reg::I32(vec![0; CHUNK]),
            Class::I64 => Reg::I64(vec![0; CHUNK]),
            Class::Bool => Reg::Bool(vec![false; CHUNK]),
        }
    }
}

#[derive(Clone, Debug)]
enum Instr {
    Load {
        dst: usize,
        input: usize,
        access: Access,
    },
    Fill {
        dst: usize,
        value: f64,
    },
    Iota {
        dst: usize,
        div: usize,
        dim: usize,
    },
    Random {
        dst: usize,
        key: usize,
        salt: u64,
    },
    Unary {
        dst: usize,
        op: UnaryOp,
        a: usize,
    },
    Binary {
        dst: usize,
        op: BinaryOp,
        a: usize,
        b: usize,
    },
    Compare {
        dst: usize,
        op: CmpOp,
        a: usize,
        b: usize,
    },
    Select {
        dst: usize,
        c: usize,
        a: usize,
        b: usize,
    },
    Cast {
        dst: usize,
        a: usize,
        to: DType,
    },
}

/// A fused group ready to run: register instructions over the group's
/// distinct memory inputs, and the registers stored to its outputs.
#[derive(Clone, Debug)]
pub struct FusedKernel {
    /// Stored nodes the kernel reads, in input order.
    pub inputs: Vec<NodeId>,
    /// Nodes it writes, in output order.
    pub outputs: Vec<NodeId>,
    classes: Vec<Class>,
    /// Constants and scalar loads (run once per task), then per-chunk loads,
    /// then computations.
    instrs: Vec<Instr>,
    /// How many leading instructions run once per task.
    constants: usize,
    stores: Vec<usize>,
    numel: usize,
}

impl FusedKernel {
    /// Compile a fused group of `graph`.
    pub fn new(graph: &Graph, group: &FusedGroup) -> FusedKernel {
        let mut k = FusedKernel {
            inputs: vec![],
            outputs: group.stores.clone(),
            classes: vec![],
            instrs: vec![],
            constants: 0,
            stores: vec![],
            numel: group.numel,
        };
        let mut reg_of: HashMap<NodeId, usize> = HashMap::new();
        let mut source_reg: HashMap<String, usize> = HashMap::new();
        let mut loads = vec![];
        let mut fills = vec![];
        let mut compute = vec![];
        let new_reg = |classes: &mut Vec<Class>, c: Class| {
            classes.push(c);
            classes.len() - 1
        };
        // Pass 1: registers for every source that is not a group member.
        for (m, srcs) in group.members.iter().zip(&group.sources) {
            for (src, &arg) in srcs.iter().zip(&graph.nodes[*m].args) {
                let arg_dtype = graph.nodes[arg].spec.dtype;
                let key = format!("{src:?}{arg_dtype}");
                if matches!(src, Source::Reg(_)) || source_reg.contains_key(&key) {
                    continue;
                }
                let r = match src {
                    Source::Fill(value) => {
                        let r = new_reg(&mut k.classes, class_of(arg_dtype));
                        fills.push(Instr::Fill {
                            dst: r,
                            value: *value,
                        });
                        r
                    }
                    Source::Iota(n) => {
                        let r = new_reg(&mut k.classes, class_of(graph.nodes[*n].spec.dtype));
                        compute.push(iota_instr(graph, *n, r));
                        r
                    }
                    Source::Load { node, access } => {
                        let input = match k.inputs.iter().position(|i| i == node) {
                            Some(i) => i,
                            None => {
                                k.inputs.push(*node);
                                k.inputs.len() - 1
                            }
                        };
                        let r = new_reg(&mut k.classes, class_of(graph.nodes[*node].spec.dtype));
                        // A scalar never changes between chunks: load it once per task.
                        let list = if *access == Access::Scalar {
                            &mut fills
                        } else {
                            &mut loads
                        };
                        list.push(Instr::Load {
                            dst: r,
                            input,
                            access: access.clone(),
                        });
                        r
                    }
                    Source::Reg(_) => unreachable!("skipped above"),
                };
                source_reg.insert(key, r);
            }
        }
        // Pass 2: one instruction per member.
        for (&m, srcs) in group.members.iter().zip(&group.sources) {
            let node = &graph.nodes[m];
            let arg: Vec<usize> = srcs
                .iter()
                .zip(&node.args)
                .map(|(s, &a)| match s {
                    Source::Reg(n) => reg_of[n],
                    other => source_reg[&format!("{other:?}{}", graph.nodes[a].spec.dtype)],
                })
                .collect();
            let dst = new_reg(&mut k.classes, class_of(node.spec.dtype));
            let instr = match &node.op {
                Op::Fill { value, .. } => {
                    fills.push(Instr::Fill { dst, value: *value });
                    reg_of.insert(m, dst);
                    continue;
                }
                Op::Iota { .. } => iota_instr(graph, m, dst),
                Op::RandomUniform { salt, .. } => Instr::Random {
                    dst,
                    key: arg[0],
                    salt: *salt,
                },
                Op::Unary(op) => Instr::Unary {
                    dst,
                    op: *op,
                    a: arg[0],
                },
                Op::Binary(op) => Instr::Binary {
                    dst,
                    op: *op,
                    a: arg[0],
                    b: arg[1],
                },
                Op::Compare(op) => Instr::Compare {
                    dst,
                    op: *op,
                    a: arg[0],
                    b: arg[1],
                },
                Op::Select => Instr::Select {
                    dst,
                    c: arg[0],
                    a: arg[1],
                    b: arg[2],
                },
                Op::Cast { to } => Instr::Cast {
                    dst,
                    a: arg[0],
                    to: *to,
                },
                other => unreachable!("{} is not elementwise", other.name()),
            };
            compute.push(instr);
            reg_of.insert(m, dst);
        }
        k.constants = fills.len();
        k.instrs = fills.into_iter().chain(loads).chain(compute).collect();
        k.stores = group.stores.iter().map(|s| reg_of[s]).collect();
        k
    }

    /// Number of register instructions (for listings).
    pub fn instr_count(&self) -> usize {
        self.instrs.len()
    }

    /// Run over all elements, reading `inputs` and writing `outputs`.
    pub fn run(&self, inputs: &[Raw], outputs: &[Raw]) {
        let n = self.numel;
        if n <= TASK {
            self.run_range(inputs, outputs, 0, n);
        } else {
            (0..n.div_ceil(TASK)).into_par_iter().for_each(|t| {
                let start = t * TASK;
                self.run_range(inputs, outputs, start, (start + TASK).min(n));
            });
        }
    }

    fn run_range(&self, inputs: &[Raw], outputs: &[Raw], start: usize, end: usize) {
        let mut regs: Vec<Reg> = self.classes.iter().map(|&c| Reg::new(c)).collect();
        for instr in &self.instrs[..self.constants] {
            exec(instr, &mut regs, inputs, 0, CHUNK);
        }
        let mut at = start;
        while at < end {
            let len = CHUNK.min(end - at);
            for instr in &self.instrs[self.constants..] {
                exec(instr, &mut regs, inputs, at, len);
            }
            for (&r, out) in self.stores.iter().zip(outputs) {
                store(&regs[r], *out, at, len);
            }
            at += len;
        }
    }
}

fn iota_instr(graph: &Graph, n: NodeId, dst: usize) -> Instr {
    let Op::Iota { axis, shape } = &graph.nodes[n].op else {
        unreachable!("iota")
    };
    let div: usize = shape[axis + 1..].iter().product();
    Instr::Iota {
        dst,
        div,
        dim: shape[*axis],
    }
}

/// Two distinct registers: `dst` mutably and `a` shared.
fn pair(regs: &mut [Reg], dst: usize, a: usize) -> (&mut Reg, &Reg) {
    debug_assert_ne!(dst, a);
    if dst < a {
        let (lo, hi) = regs.split_at_mut(a);
        (&mut lo[dst], &hi[0])
    } else {
        let (lo, hi) = regs.split_at_mut(dst);
        (&mut hi[0], &lo[a])
    }
}

/// Take `dst` out of the register file to write it while reading others.
fn with_dst(regs: &mut [Reg], dst: usize, f: impl FnOnce(&mut Reg, &[Reg])) {
    let mut d = std::mem::replace(&mut regs[dst], Reg::Bool(Vec::new()));
    f(&mut d, regs);
    regs[dst] = d;
}

fn exec(instr: &Instr, regs: &mut [Reg], inputs: &[Raw], at: usize, len: usize) {
    match instr {
        Instr::Load { dst, input, access } => {
            load(&mut regs[*dst], inputs[*input], access, at, len)
        }
        Instr::Fill { dst, value } => fill(&mut regs[*dst], *value, len),
        Instr::Iota { dst, div, dim } => {
            let idx = |i: usize| ((at + i) / div) % dim;
            match &mut regs[*dst] {
                Reg::F32(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as f32),
                Reg::F64(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as f64),
                Reg::I32(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as i32),
                Reg::I64(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as i64),
                Reg::Bool(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) != 0),
            }
        }
        Instr::Random { dst, key, salt } => {
            let Reg::I32(k) = &regs[*key] else {
                unreachable!("i32 key")
            };
            let key = k[0];
            match &mut regs[*dst] {
                Reg::F32(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = uniform(key, *salt, at + i) as f32),
                Reg::F64(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = uniform(key, *salt, at + i)),
                _ => unreachable!("float random"),
            }
        }
        Instr::Unary { dst, op, a } => {
            let (d, a) = pair(regs, *dst, *a);
            unary(*op, d, a, len)
        }
        Instr::Binary { dst, op, a, b } => {
            with_dst(regs, *dst, |d, r| binary(*op, d, &r[*a], &r[*b], len))
        }
        Instr::Compare { dst, op, a, b } => {
            with_dst(regs, *dst, |d, r| compare(*op, d, &r[*a], &r[*b], len))
        }
        Instr::Select { dst, c, a, b } => {
            with_dst(regs, *dst, |d, r| select(d, &r[*c], &r[*a], &r[*b], len))
        }
        Instr::Cast { dst, a, to } => {
            let (d, a) = pair(regs, *dst, *a);
            cast(d, a, *to, len)
        }
    }
}

/// The counter-based generator: a uniform in [0, 1) from (key, salt, index)
/// by two rounds of the SplitMix64 finaliser. Pure integer arithmetic, so
/// every backend draws the same stream.
pub fn uniform(key: i32, salt: u64, index: usize) -> f64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    let stream = mix((key as u32 as u64) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let bits = mix(stream.wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    (bits >> 40) as f64 / (1u64 << 24) as f64
}

fn fill(d: &mut Reg, v: f64, len: usize) {
    match d {
        Reg::F32(d) => d[..len].fill(v as f32),
        Reg::F64(d) => d[..len].fill(v),
        Reg::I32(d) => d[..len].fill(v as i32),
        Reg::I64(d) => d[..len].fill(v as i64),
        Reg::Bool(d) => d[..len].fill(v != 0.0),
    }
}

/// Walk `len` group elements starting at `at` as runs along the last axis:
/// `f(position in chunk, source offset, run length, source step)`. The
/// multi-index carry is paid once per run, and each run is then a plain
/// copy (step 1), a splat (step 0, a broadcast axis) or a strided read.
fn for_each_run(
    shape: &[usize],
    strides: &[usize],
    at: usize,
    len: usize,
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let r = shape.len();
    let mut idx = vec![0usize; r];
    let mut rem = at;
    for d in (0..r).rev() {
        idx[d] = rem % shape[d];
        rem /= shape[d];
    }
    let mut off: usize = (0..r).map(|d| idx[d] * strides[d]).sum();
    let (last, step) = (shape[r - 1], strides[r - 1]);
    let mut filled = 0;
    while filled < len {
        let run = (last - idx[r - 1]).min(len - filled);
        f(filled, off, run, step);
        filled += run;
        // Advance the multi-index by `run` along the last axis, carrying.
        idx[r - 1] += run;
        off += run * step;
        let mut d = r - 1;
        while idx[d] == shape[d] && d > 0 {
            off -= strides[d] * idx[d];
            idx[d] = 0;
            d -= 1;
            idx[d] += 1;
            off += strides[d];
        }
    }
}

macro_rules! load_as {
    ($d:expr, $src:expr, $access:expr, $at:expr, $len:expr, $conv:expr) => {{
        let src = $src;
        let conv = $conv;
        match $access {
            Access::Contiguous => {
                for (x, s) in $d[..$len].iter_mut().zip(&src[$at..$at + $len]) {
                    *x = conv(*s);
                }
            }
            Access::Scalar => {
                let v = conv(src[0]);
                $d[..$len].fill(v);
            }
            Access::Strided { shape, strides } => {
                let d = &mut $d[..$len];
                for_each_run(shape, strides, $at, $len, |pos, off, run, step| {
                    let out = &mut d[pos..pos + run];
                    match step {
                        0 => out.fill(conv(src[off])),
                        1 => {
                            for (x, s) in out.iter_mut().zip(&src[off..off + run]) {
                                *x = conv(*s);
                            }
                        }
                        _ => {
                            for (i, x) in out.iter_mut().enumerate() {
                                *x = conv(src[off + i * step]);
                            }
                        }
                    }
                });
            }
        }
    }};
}

fn load(d: &mut Reg, src: Raw, access: &Access, at: usize, len: usize) {
    // SAFETY: `src` is a live buffer of its dtype; within this chunk no
    // store to the same elements happens before the load completes.
    unsafe {
        match (d, src.dtype) {
            (Reg::F32(d), DType::F32) => {
                load_as!(d, src.slice::<f32>(), access, at, len, |x: f32| x)
            }
            (Reg::F32(d), DType::F16) => {
                load_as!(d, src.slice::<f16>(), access, at, len, |x: f16| x.to_f32())
            }
            (Reg::F32(d), DType::BF16) => {
                load_as!(d, src.slice::<bf16>(), access, at, len, |x: bf16| x
                    .to_f32())
            }
            (Reg::F64(d), DType::F64) => {
                load_as!(d, src.slice::<f64>(), access, at, len, |x: f64| x)
            }
            (Reg::I32(d), DType::I32) => {
                load_as!(d, src.slice::<i32>(), access, at, len, |x: i32| x)
            }
            (Reg::I32(d), DType::U8) => {
                load_as!(d, src.slice::<u8>(), access, at, len, |x: u8| x as i32)
            }
            (Reg::I64(d), DType::I64) => {
                load_as!(d, src.slice::<i64>(), access, at, len, |x: i64| x)
            }
            (Reg::Bool(d), DType::Bool) => {
                load_as!(d, src.slice::<bool>(), access, at, len, |x: bool| x)
            }
            (_, dt) => unreachable!("register class mismatch loading {dt}"),
        }
    }
}

fn store(r: &Reg, out: Raw, at: usize, len: usize) {
    // SAFETY: each task writes a disjoint range [at, at+len) of `out`.
    unsafe {
        macro_rules! put {
            ($t:ty, $src:expr, $conv:expr) => {{
                let p = out.ptr::<$t>().add(at);
                for (i, &x) in $src[..len].iter().enumerate() {
                    *p.add(i) = $conv(x);
                }
            }};
        }
        match (r, out.dtype) {
            (Reg::F32(s), DType::F32) => put!(f32, s, |x: f32| x),
            (Reg::F32(s), DType::F16) => put!(f16, s, f16::from_f32),
            (Reg::F32(s), DType::BF16) => put!(bf16, s, bf16::from_f32),
            (Reg::F64(s), DType::F64) => put!(f64, s, |x: f64| x),
            (Reg::I32(s), DType::I32) => put!(i32, s, |x: i32| x),
            (Reg::I32(s), DType::U8) => put!(u8, s, |x: i32| x as u8),
            (Reg::I64(s), DType::I64) => put!(i64, s, |x: i64| x),
            (Reg::Bool(s), DType::Bool) => put!(bool, s, |x: bool| x),
            (_, dt) => unreachable!("register class mismatch storing {dt}"),
        }
    }
}

/// `d[i] = f(a[i])` over one chunk; one loop per op so each inlines and
/// vectorises (a function pointer per element would do neither).
macro_rules! map1 {
    ($d:expr, $a:expr, |$x:ident| $e:expr) => {{
        for (o, &$x) in $d.iter_mut().zip($a.iter()) {
            *o = $e;
        }
    }};
}

// The scalar functions are the table in `crate::semantics`, shared with
// constant folding and mirrored by the CUDA codegen; each arm of the
// `each_*!` dispatch is one loop with a constant op, so it inlines and
// vectorises. An op float-only by the table never reaches an integer
// register: `ir::infer` refuses it through the same table.

fn unary(op: UnaryOp, d: &mut Reg, a: &Reg, len: usize) {
    match (d, a) {
        (Reg::F32(d), Reg::F32(a)) => {
            each_float_unary!(op, OP => map1!(d[..len], &a[..len], |x| sem::float_unary(OP, x)))
        }
        (Reg::F64(d), Reg::F64(a)) => {
            each_float_unary!(op, OP => map1!(d[..len], &a[..len], |x| sem::float_unary(OP, x)))
        }
        (Reg::I32(d), Reg::I32(a)) => int_unary(op, &mut d[..len], &a[..len]),
        (Reg::I64(d), Reg::I64(a)) => int_unary(op, &mut d[..len], &a[..len]),
        _ => unreachable!("unary on mismatched registers"),
    }
}

fn int_unary<T: sem::IntElem>(op: UnaryOp, d: &mut [T], a: &[T]) {
    let Some(op) = op.on_integers() else {
        unreachable!("{op:?} is float-only; ir::infer refuses it on integers")
    };
    each_int_unary!(op, OP => map1!(d, a, |x| sem::int_unary(OP, x)))
}

macro_rules! zip2 {
    ($d:expr, $a:expr, $b:expr, $len:expr, |$x:ident, $y:ident| $e:expr) => {{
        for ((o, &$x), &$y) in $d[..$len].iter_mut().zip(&$a[..$len]).zip(&$b[..$len]) {
            *o = $e;
        }
    }};
}

fn binary(op: BinaryOp, d: &mut Reg, a: &Reg, b: &Reg, len: usize) {
    match (d, a, b) {
        (Reg::F32(d), Reg::F32(a), Reg::F32(b)) => {
            each_float_binary!(op, OP => zip2!(d, a, b, len, |x, y| sem::float_binary(OP, x, y)))
        }
        (Reg::F64(d), Reg::F64(a), Reg::F64(b)) => {
            each_float_binary!(op, OP => zip2!(d, a, b, len, |x, y| sem::float_binary(OP, x, y)))
        }
        (Reg::I32(d), Reg::I32(a), Reg::I32(b)) => int_binary(op, d, a, b, len),
        (Reg::I64(d), Reg::I64(a), Reg::I64(b)) => int_binary(op, d, a, b, len),
        _ => unreachable!("binary on mismatched registers"),
    }
}

fn int_binary<T: sem::IntElem>(op: BinaryOp, d: &mut [T], a: &[T], b: &[T], len: usize) {
    let Some(op) = op.on_integers() else {
        unreachable!("{op:?} is float-only; ir::infer refuses it on integers")
    };
    each_int_binary!(op, OP => zip2!(d, a, b, len, |x, y| sem::int_binary(OP, x, y)))
}

fn compare(op: CmpOp, d: &mut Reg, a: &Reg, b: &Reg, len: usize) {
    let Reg::Bool(d) = d else {
        unreachable!("compare writes bool")
    };
    match (a, b) {
        (Reg::F32(a), Reg::F32(b)) => cmp_into(op, d, a, b, len),
        (Reg::F64(a), Reg::F64(b)) => cmp_into(op, d, a, b, len),
        (Reg::I32(a), Reg::I32(b)) => cmp_into(op, d, a, b, len),
        (Reg::I64(a), Reg::I64(b)) => cmp_into(op, d, a, b, len),
        (Reg::Bool(a), Reg::Bool(b)) => cmp_into(op, d, a, b, len),
        _ => unreachable!("compare on mismatched registers"),
    }
}

fn cmp_into<T: PartialOrd + Copy>(op: CmpOp, d: &mut [bool], a: &[T], b: &[T], len: usize) {
    each_compare!(op, OP => zip2!(d, a, b, len, |x, y| sem::compare(OP, x, y)))
}

fn select(d: &mut Reg, c: &Reg, a: &Reg, b: &Reg, len: usize) {
    let Reg::Bool(c) = c else {
        unreachable!("bool condition")
    };
    // Branch-free: blend the bit patterns under an all-ones/all-zeros mask,
    // so the loop vectorises (a branch per element would not).
    macro_rules! sel {
        ($d:expr, $a:expr, $b:expr, $bits:ty, $to:expr, $from:expr) => {
            for (((o, &c), &x), &y) in $d[..len]
                .iter_mut()
                .zip(&c[..len])
                .zip(&$a[..len])
                .zip(&$b[..len])
            {
                let mask = (0 as $bits).wrapping_sub(c as $bits);
                *o = $from(($to(x) & mask) | ($to(y) & !mask));
            }
        };
    }
    match (d, a, b) {
        (Reg::F32(d), Reg::F32(a), Reg::F32(b)) => sel!(d, a, b, u32, f32::to_bits, f32::from_bits),
        (Reg::F64(d), Reg::F64(a), Reg::F64(b)) => sel!(d, a, b, u64, f64::to_bits, f64::from_bits),
        (Reg::I32(d), Reg::I32(a), Reg::I32(b)) => sel!(d, a, b, i32, |v| v, |v| v),
        (Reg::I64(d), Reg::I64(a), Reg::I64(b)) => sel!(d, a, b, i64, |v| v, |v| v),
        (Reg::Bool(d), Reg::Bool(a), Reg::Bool(b)) => {
            for (((o, &c), &x), &y) in d[..len]
                .iter_mut()
                .zip(&c[..len])
                .zip(&a[..len])
                .zip(&b[..len])
            {
                *o = (c & x) | (!c & y);
            }
        }
        _ => unreachable!("select on mismatched registers"),
    }
}

fn cast(d: &mut Reg, a: &Reg, to: DType, len: usize) {
    macro_rules! conv {
        ($d:expr, $a:expr, $f:expr) => {
            for (x, &y) in $d[..len].iter_mut().zip(&$a[..len]) {
                *x = $f(y);
            }
        };
    }
    match (d, a) {
        (Reg::F32(d), Reg::F32(a)) => match to {
            DType::F16 => conv!(d, a, |x: f32| f16::from_f32(x).to_f32()),
            DType::BF16 => conv!(d, a, |x: f32| bf16::from_f32(x).to_f32()),
            _ => conv!(d, a, |x: f32| x),
        },
        (Reg::F32(d), Reg::F64(a)) => match to {
            DType::F16 => conv!(d, a, |x: f64| f16::from_f64(x).to_f32()),
            DType::BF16 => conv!(d, a, |x: f64| bf16::from_f64(x).to_f32()),
            _ => conv!(d, a, |x: f64| x as f32),
        },
        (Reg::F32(d), Reg::I32(a)) => conv!(d, a, |x: i32| x as f32),
        (Reg::F32(d), Reg::I64(a)) => conv!(d, a, |x: i64| x as f32),
        (Reg::F32(d), Reg::Bool(a)) => conv!(d, a, |x: bool| x as u8 as f32),
        (Reg::F64(d), Reg::F32(a)) => conv!(d, a, |x: f32| x as f64),
        (Reg::F64(d), Reg::F64(a)) => conv!(d, a, |x: f64| x),
        (Reg::F64(d), Reg::I32(a)) => conv!(d, a, |x: i32| x as f64),
        (Reg::F64(d), Reg::I64(a)) => conv!(d, a, |x: i64| x as f64),
        (Reg::F64(d), Reg::Bool(a)) => conv!(d, a, |x: bool| x as u8 as f64),
        (Reg::I32(d), Reg::F32(a)) => conv!(d, a, |x: f32| if to == DType::U8 {
            x as u8 as i32
        } else {
            x as i32
        }),
        (Reg::I32(d), Reg::F64(a)) => conv!(d, a, |x: f64| if to == DType::U8 {
            x as u8 as i32
        } else {
            x as i32
        }),
        (Reg::I32(d), Reg::I32(a)) => conv!(d, a, |x: i32| if to == DType::U8 {
            x as u8 as i32
        } else {
            x
        }),
        (Reg::I32(d), Reg::I64(a)) => conv!(d, a, |x: i64| if to == DType::U8 {
            x as u8 as i32
        } else {
            x as i32
        }),
        (Reg::I32(d), Reg::Bool(a)) => conv!(d, a, |x: bool| x as i32),
        (Reg::I64(d), Reg::F32(a)) => conv!(d, a, |x: f32| x as i64),
        (Reg::I64(d), Reg::F64(a)) => conv!(d, a, |x: f64| x as i64),
        (Reg::I64(d), Reg::I32(a)) => conv!(d, a, |x: i32| x as i64),
        (Reg::I64(d), Reg::I64(a)) => conv!(d, a, |x: i64| x),
        (Reg::I64(d), Reg::Bool(a)) => conv!(d, a, |x: bool| x as i64),
        (Reg::Bool(d), Reg::F32(a)) => conv!(d, a, |x: f32| x != 0.0),
        (Reg::Bool(d), Reg::F64(a)) => conv!(d, a, |x: f64| x != 0.0),
        (Reg::Bool(d), Reg::I32(a)) => conv!(d, a, |x: i32| x != 0),
        (Reg::Bool(d), Reg::I64(a)) => conv!(d, a, |x: i64| x != 0),
        (Reg::Bool(d), Reg::Bool(a)) => conv!(d, a, |x: bool| x),
    }
}
