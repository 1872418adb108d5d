//! Data movement: one strided gather (permute, broadcast, slice), one
//! strided scatter (pad) and a row-wise concat, all dtype-agnostic
//! (elements are moved as plain words of the dtype's size), plus row
//! take / scatter-add.

use super::raw::Raw;
use nitro_device::DType;
use rayon::prelude::*;

const PARALLEL_MIN: usize = 64 * 1024;

/// Decompose flat row `row` over `outer` shape into an offset with `strides`.
pub(crate) fn row_offset(mut row: usize, outer: &[usize], strides: &[usize]) -> usize {
    let mut off = 0;
    for d in (0..outer.len()).rev() {
        off += (row % outer[d]) * strides[d];
        row /= outer[d];
    }
    off
}

/// How output rows map into the source: `inner` elements per row read at
/// `step`, rows laid over `outer` with source `strides`, from `offset`.
struct RowWalk<'a> {
    inner: usize,
    step: usize,
    outer: &'a [usize],
    strides: &'a [usize],
    offset: usize,
}

/// Copy the output rows of `out`, the first being row `first`, walking the
/// outer multi-index incrementally (no division per row).
fn gather_rows<T: Copy>(src: &[T], out: &mut [T], first: usize, w: &RowWalk<'_>) {
    let r = w.outer.len();
    let mut idx = vec![0usize; r];
    let mut rem = first;
    for d in (0..r).rev() {
        idx[d] = rem % w.outer[d];
        rem /= w.outer[d];
    }
    let mut base = w.offset + (0..r).map(|d| idx[d] * w.strides[d]).sum::<usize>();
    for row in out.chunks_mut(w.inner) {
        if w.step == 1 {
            row.copy_from_slice(&src[base..base + w.inner]);
        } else {
            for (j, o) in row.iter_mut().enumerate() {
                *o = src[base + j * w.step];
            }
        }
        let mut d = r;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            base += w.strides[d];
            if idx[d] < w.outer[d] {
                break;
            }
            base -= w.strides[d] * idx[d];
            idx[d] = 0;
        }
    }
}

fn gather_t<T: Copy + Send + Sync>(
    src: &[T],
    dst: &mut [T],
    shape: &[usize],
    strides: &[usize],
    offset: usize,
) {
    if dst.is_empty() {
        return;
    }
    let r = shape.len();
    if r == 0 {
        dst[0] = src[offset];
        return;
    }
    let inner = shape[r - 1];
    if inner == 0 {
        return;
    }
    let walk = RowWalk {
        inner,
        step: strides[r - 1],
        outer: &shape[..r - 1],
        strides: &strides[..r - 1],
        offset,
    };
    by_row_blocks(dst, inner, |first, out| gather_rows(src, out, first, &walk));
}

/// `task(first_row, block)` over `dst` cut into blocks of whole rows of
/// `row` elements, about 32K elements each, over the pool when `dst` is
/// large.
fn by_row_blocks<T: Send>(dst: &mut [T], row: usize, task: impl Fn(usize, &mut [T]) + Sync) {
    let rows_per_task = (32 * 1024 / row).max(1);
    let run = |(t, block): (usize, &mut [T])| task(t * rows_per_task, block);
    if dst.len() >= PARALLEL_MIN {
        dst.par_chunks_mut(rows_per_task * row)
            .enumerate()
            .for_each(run);
    } else {
        dst.chunks_mut(rows_per_task * row)
            .enumerate()
            .for_each(run);
    }
}

/// `dst[e] = src[offset + Σ index_d(e) * strides[d]]` over `shape` (= dst's shape).
pub fn gather(src: Raw, dst: Raw, shape: &[usize], strides: &[usize], offset: usize) {
    // SAFETY: src and dst are distinct live buffers of the same dtype.
    unsafe {
        match dst.dtype.size_of() {
            1 => gather_t(
                src.slice::<u8>(),
                dst.slice_mut::<u8>(),
                shape,
                strides,
                offset,
            ),
            2 => gather_t(
                src.slice::<u16>(),
                dst.slice_mut::<u16>(),
                shape,
                strides,
                offset,
            ),
            4 => gather_t(
                src.slice::<u32>(),
                dst.slice_mut::<u32>(),
                shape,
                strides,
                offset,
            ),
            _ => gather_t(
                src.slice::<u64>(),
                dst.slice_mut::<u64>(),
                shape,
                strides,
                offset,
            ),
        }
    }
}

fn scatter_t<T: Copy>(src: &[T], dst: &mut [T], shape: &[usize], strides: &[usize], offset: usize) {
    let r = shape.len();
    if src.is_empty() {
        return;
    }
    if r == 0 {
        dst[offset] = src[0];
        return;
    }
    let inner = shape[r - 1];
    let step = strides[r - 1];
    for (i, row) in src.chunks(inner).enumerate() {
        let base = offset + row_offset(i, &shape[..r - 1], &strides[..r - 1]);
        if step == 1 {
            dst[base..base + inner].copy_from_slice(row);
        } else {
            for (j, &v) in row.iter().enumerate() {
                dst[base + j * step] = v;
            }
        }
    }
}

/// `dst[offset + Σ index_d(e) * strides[d]] = src[e]` over `shape` (= src's shape).
pub fn scatter(src: Raw, dst: Raw, shape: &[usize], strides: &[usize], offset: usize) {
    // SAFETY: src and dst are distinct live buffers of the same dtype.
    unsafe {
        match dst.dtype.size_of() {
            1 => scatter_t(
                src.slice::<u8>(),
                dst.slice_mut::<u8>(),
                shape,
                strides,
                offset,
            ),
            2 => scatter_t(
                src.slice::<u16>(),
                dst.slice_mut::<u16>(),
                shape,
                strides,
                offset,
            ),
            4 => scatter_t(
                src.slice::<u32>(),
                dst.slice_mut::<u32>(),
                shape,
                strides,
                offset,
            ),
            _ => scatter_t(
                src.slice::<u64>(),
                dst.slice_mut::<u64>(),
                shape,
                strides,
                offset,
            ),
        }
    }
}

/// Each output row: the matching row of every source, side by side.
fn concat_t<T: Copy + Send + Sync>(srcs: &[&[T]], widths: &[usize], dst: &mut [T]) {
    let total: usize = widths.iter().sum();
    if total == 0 || dst.is_empty() {
        return;
    }
    by_row_blocks(dst, total, |first, block| {
        for (r, row) in block.chunks_mut(total).enumerate() {
            let o = first + r;
            let mut at = 0;
            for (src, &w) in srcs.iter().zip(widths) {
                row[at..at + w].copy_from_slice(&src[o * w..(o + 1) * w]);
                at += w;
            }
        }
    });
}

/// `dst` = `srcs` concatenated along an axis, seen as rows: every source
/// holds as many rows as `dst` (the product of the dims before the axis),
/// source `i` `widths[i]` elements per row (its extent along the axis times
/// the dims after it). One pass writing each output row front to back, over
/// the pool when large; a scatter per source (what pad does) went over the
/// output once per source, strided, on one thread: 1.3 ms for the GPT's
/// q|k|v gradient [16, 128, 768].
pub fn concat(srcs: &[Raw], widths: &[usize], dst: Raw) {
    macro_rules! words {
        ($t:ty) => {{
            // SAFETY: every source and dst are distinct live buffers of
            // one dtype whose rows the caller sized (see above).
            let parts: Vec<&[$t]> = srcs.iter().map(|s| unsafe { s.slice::<$t>() }).collect();
            concat_t(&parts, widths, unsafe { dst.slice_mut::<$t>() })
        }};
    }
    match dst.dtype.size_of() {
        1 => words!(u8),
        2 => words!(u16),
        4 => words!(u32),
        _ => words!(u64),
    }
}

/// Fill `dst` with `value` converted to its dtype.
pub fn fill(dst: Raw, value: f64) {
    // SAFETY: dst is a live buffer of its dtype.
    unsafe {
        match dst.dtype {
            DType::F32 => dst.slice_mut::<f32>().fill(value as f32),
            DType::F64 => dst.slice_mut::<f64>().fill(value),
            DType::F16 => dst
                .slice_mut::<half::f16>()
                .fill(half::f16::from_f64(value)),
            DType::BF16 => dst
                .slice_mut::<half::bf16>()
                .fill(half::bf16::from_f64(value)),
            DType::I32 => dst.slice_mut::<i32>().fill(value as i32),
            DType::I64 => dst.slice_mut::<i64>().fill(value as i64),
            DType::U8 => dst.slice_mut::<u8>().fill(value as u8),
            DType::Bool => dst.slice_mut::<bool>().fill(value != 0.0),
        }
    }
}

/// Read integer indices as usize, clamping into `0..rows` (as XLA does:
/// an out-of-range index never reads or writes outside the table).
fn indices(idx: Raw, rows: usize) -> Vec<usize> {
    let clamp = |i: i64| i.clamp(0, rows.saturating_sub(1) as i64) as usize;
    // SAFETY: idx is a live integer buffer.
    unsafe {
        match idx.dtype {
            DType::I32 => idx
                .slice::<i32>()
                .iter()
                .map(|&i| clamp(i as i64))
                .collect(),
            _ => idx.slice::<i64>().iter().map(|&i| clamp(i)).collect(),
        }
    }
}

/// `dst[i, ..] = table[idx[i], ..]`.
pub fn take(table: Raw, idx: Raw, dst: Raw, table_rows: usize) {
    let row = table.len.checked_div(table_rows).unwrap_or(0);
    if row == 0 {
        return;
    }
    for (i, r) in indices(idx, table_rows).into_iter().enumerate() {
        gather(table, dst.sub(i * row, row), &[row], &[1], r * row);
    }
}

/// `dst = 0; dst[idx[i], ..] += upd[i, ..]` (indices clamped).
pub fn scatter_add(upd: Raw, idx: Raw, dst: Raw, rows: usize) {
    fill(dst, 0.0);
    let n = indices(idx, rows);
    if n.is_empty() || rows == 0 {
        return;
    }
    let row = upd.len / n.len();
    macro_rules! add {
        ($t:ty) => {{
            // SAFETY: distinct live buffers of dtype $t.
            let (u, d) = unsafe { (upd.slice::<$t>(), dst.slice_mut::<$t>()) };
            for (i, &r) in n.iter().enumerate() {
                for (o, &v) in d[r * row..(r + 1) * row]
                    .iter_mut()
                    .zip(&u[i * row..(i + 1) * row])
                {
                    *o += v;
                }
            }
        }};
    }
    match dst.dtype {
        DType::F32 => add!(f32),
        DType::F64 => add!(f64),
        DType::I32 => add!(i32),
        DType::I64 => add!(i64),
        other => unreachable!("scatter_add on {other} is refused at trace time"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nitro_device::HostBuffer;

    /// Concat along axis 2 of `[6, 40, e_i, 7, 13]` sources (one of them
    /// empty along the axis), large enough for the pooled path, against the
    /// definition: output index (o, a, i) holds the source whose axis range
    /// contains a, at a minus its start.
    #[test]
    fn concat_places_every_element_by_its_index() {
        let (outer, inner) = (6 * 40, 7 * 13);
        let extents = [3usize, 0, 1, 5];
        let total: usize = extents.iter().sum();
        let mut srcs: Vec<HostBuffer> = extents
            .iter()
            .enumerate()
            .map(|(s, &e)| {
                HostBuffer::F32(
                    (0..outer * e * inner)
                        .map(|j| (s * 1_000_000 + j) as f32)
                        .collect(),
                )
            })
            .collect();
        let mut dst = HostBuffer::F32(vec![-1.0; outer * total * inner]);
        assert!(outer * total * inner >= PARALLEL_MIN);
        let raws: Vec<Raw> = srcs.iter_mut().map(Raw::of).collect();
        let widths: Vec<usize> = extents.iter().map(|e| e * inner).collect();
        concat(&raws, &widths, Raw::of(&mut dst));
        let HostBuffer::F32(got) = dst else {
            unreachable!()
        };
        for o in 0..outer {
            for a in 0..total {
                let (mut s, mut start) = (0, 0);
                while a >= start + extents[s] {
                    start += extents[s];
                    s += 1;
                }
                for i in 0..inner {
                    let j = (o * extents[s] + (a - start)) * inner + i;
                    let want = (s * 1_000_000 + j) as f32;
                    assert_eq!(got[(o * total + a) * inner + i], want, "o {o} a {a} i {i}");
                }
            }
        }
    }
}
