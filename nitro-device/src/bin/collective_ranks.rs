//! The program the multi-rank tests (`tests/mpi_ranks.rs`) launch under `mpirun` (feature `mpi`):
//!
//! - `sum DIR`: all-reduce f32, f64 and i64 buffers, broadcast from the
//!   last rank, barrier; write every result's bits, one line each, to
//!   `DIR/rank<R>.txt` (files, because ranks' long lines interleave on a
//!   shared stdout), for the test to compare across ranks and with its own
//!   sequential sum.
//! - `hang R` / `exit R`: rank R hangs (or exits with code 7) before the
//!   all-reduce; the others must fail naming it, exit code 3.

#[path = "../../tests/support/rank_data.rs"]
mod rank_data;

use nitro_device::collective::ProcessGroup;
use nitro_device::{DType, HostBuffer};
use rank_data::{rank_value, BIG, LEN};
use std::fmt::Write as _;

fn hex<T: Copy>(v: &[T], bits: impl Fn(T) -> u64) -> String {
    v.iter().fold(String::new(), |mut s, &x| {
        let _ = write!(s, "{:x},", bits(x));
        s
    })
}

fn run(group: &ProcessGroup, mode: &str, arg: &str) -> Result<(), String> {
    let target: usize = arg.parse().unwrap_or(0);
    let r = group.rank();
    let err = |e: nitro_device::collective::CollectiveError| e.to_string();
    let hang = || loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    };
    match mode {
        "hang" if r == target => hang(),
        "exit" if r == target => std::process::exit(7),
        // Hang after one all-reduce: the group is established (on one
        // machine, its shared window allocated) when the rank goes quiet.
        "hang_later" => {
            let mut warm = HostBuffer::from(vec![1.0f32; 8]);
            group.all_reduce_sum(&mut warm).map_err(err)?;
            if r == target {
                hang();
            }
        }
        _ => {}
    }
    let mut f32s = HostBuffer::from(
        (0..LEN)
            .map(|i| rank_value(r, i) as f32)
            .collect::<Vec<_>>(),
    );
    let mut f64s = HostBuffer::from((0..LEN).map(|i| rank_value(r, i)).collect::<Vec<_>>());
    let mut i64s = HostBuffer::from((0..LEN).map(|i| (i * 1000 + r) as i64).collect::<Vec<_>>());
    group.all_reduce_sum(&mut f32s).map_err(err)?;
    group.all_reduce_sum(&mut f64s).map_err(err)?;
    group.all_reduce_sum(&mut i64s).map_err(err)?;
    // Larger than any buffer before (a shared window grows for it), and
    // summed twice so that both halves of the window serve it.
    let mut big = HostBuffer::from((0..BIG).map(|i| rank_value(r, i)).collect::<Vec<_>>());
    group.all_reduce_sum(&mut big).map_err(err)?;
    let mut big2 = HostBuffer::from(
        (0..BIG)
            .map(|i| -rank_value(r, BIG - 1 - i))
            .collect::<Vec<_>>(),
    );
    group.all_reduce_sum(&mut big2).map_err(err)?;
    // The same sum with the contribution written straight into the
    // transport's memory where it offers some (the shared window).
    let comm = group.communicator();
    let values: Vec<f64> = (0..BIG).map(|i| rank_value(r, i)).collect();
    let mut staged_sum = HostBuffer::from(vec![0.0f64; BIG]);
    match comm.stage(DType::F64, BIG).map_err(err)? {
        Some(staged) => {
            // SAFETY: the staged memory holds BIG f64s until the reduce.
            unsafe {
                std::ptr::copy_nonoverlapping(values.as_ptr(), staged.ptr().cast::<f64>(), BIG)
            };
            comm.all_reduce_sum_staged(staged, &mut staged_sum)
                .map_err(err)?;
        }
        None => {
            staged_sum = HostBuffer::from(values);
            comm.all_reduce_sum(&mut staged_sum).map_err(err)?;
        }
    }
    let root = group.world_size() - 1;
    let mut b = HostBuffer::from(vec![r as f64; 5]);
    group.broadcast(&mut b, root).map_err(err)?;
    group.barrier().map_err(err)?;
    let (
        HostBuffer::F32(a),
        HostBuffer::F64(d),
        HostBuffer::I64(n),
        HostBuffer::F64(b),
        HostBuffer::F64(g),
        HostBuffer::F64(g2),
        HostBuffer::F64(st),
    ) = (&f32s, &f64s, &i64s, &b, &big, &big2, &staged_sum)
    else {
        return Err("a collective changed a buffer's dtype".into());
    };
    let report = format!(
        "f32 {}\nf64 {}\ni64 {}\nbcast {}\nbig {}\nbig2 {}\nstaged {}\n",
        hex(a, |x| x.to_bits() as u64),
        hex(d, f64::to_bits),
        hex(n, |x| x as u64),
        hex(b, f64::to_bits),
        hex(g, f64::to_bits),
        hex(g2, f64::to_bits),
        hex(st, f64::to_bits)
    );
    let path = std::path::Path::new(arg).join(format!("rank{r}.txt"));
    std::fs::write(&path, report).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("sum", String::as_str).to_string();
    let arg = args.get(2).map_or(".", String::as_str).to_string();
    let group = match ProcessGroup::from_env() {
        Ok(g) => g,
        Err(e) => {
            // One write for the whole line: `eprintln!` writes its pieces
            // separately, and mpirun interleaves ranks' pieces.
            let line = format!("error: {e}\n");
            eprint!("{line}");
            std::process::exit(3);
        }
    };
    if let Err(e) = run(&group, &mode, &arg) {
        // One write for the whole line: `eprintln!` writes its pieces
        // separately, and mpirun interleaves ranks' pieces.
        let line = format!("error: {e}\n");
        eprint!("{line}");
        // Drop the broken group first: it skips MPI_Finalize, which would
        // wait for the lost rank.
        drop(group);
        std::process::exit(3);
    }
}
