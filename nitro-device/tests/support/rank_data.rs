// The inputs of the multi-rank tests, shared by the `collective_ranks`
// binary (each rank's own part) and `tests/mpi_ranks.rs` (which sums all
// parts sequentially to check the ranks' results bit for bit).

/// Rank `rank`'s element `i`: magnitudes spread over many binades and both
/// signs, so that the order of the additions changes the rounding.
pub fn rank_value(rank: usize, i: usize) -> f64 {
    let mut h = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64);
    h ^= h >> 31;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 29;
    let mantissa = (h >> 11) as f64 / (1u64 << 53) as f64;
    let exponent = (h % 40) as i32 - 20;
    let sign = if h & (1 << 7) == 0 { 1.0 } else { -1.0 };
    sign * (1.0 + mantissa) * 2f64.powi(exponent)
}

/// Elements per buffer: not a multiple of 2 or 3, so owner chunks differ
/// in length.
pub const LEN: usize = 1001;

/// Elements of the large buffer: 160 KB of f64, more than a shared window
/// first holds, and odd.
pub const BIG: usize = 20_001;
