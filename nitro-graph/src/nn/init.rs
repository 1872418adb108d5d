//! A small seeded host RNG for parameter initialisation (SplitMix64 with
//! Box-Muller normals): deterministic across platforms, no dependencies;
//! and the fallible allocation of parameter leaves, so a model too large
//! for memory (a mistyped width) is an error naming the parameter and its
//! size instead of an abort.

use crate::error::GraphError;
use crate::exec::Array;
use nitro_device::ShapeFmt;

/// Seeded generator for initial parameters.
#[derive(Clone, Debug)]
pub struct InitRng {
    state: u64,
}

impl InitRng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> InitRng {
        InitRng {
            state: seed ^ 0x6A09_E667_F3BC_C909,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Parameter `name` of `shape`, uniform in [-limit, limit).
    pub fn uniform_leaf(
        &mut self,
        name: &str,
        shape: &[usize],
        limit: f64,
    ) -> Result<Array, GraphError> {
        leaf(name, shape, || {
            ((self.uniform() * 2.0 - 1.0) * limit) as f32
        })
    }

    /// Parameter `name` of `shape`, normal with standard deviation `std`.
    pub fn normal_leaf(
        &mut self,
        name: &str,
        shape: &[usize],
        std: f64,
    ) -> Result<Array, GraphError> {
        leaf(name, shape, || (self.normal() * std) as f32)
    }
}

/// Leaf `name` of `shape` with every element `value` (biases, scales,
/// running statistics).
pub fn constant_leaf(name: &str, shape: &[usize], value: f32) -> Result<Array, GraphError> {
    leaf(name, shape, || value)
}

/// Leaf `name` of `shape` filled by `fill` in row-major order. The buffer
/// is reserved fallibly: the allocator's refusal (or a size that
/// overflows) becomes [`GraphError::Alloc`].
pub fn leaf(name: &str, shape: &[usize], fill: impl FnMut() -> f32) -> Result<Array, GraphError> {
    let too_big = || GraphError::Alloc {
        what: format!("parameter `{name}` f32{}", ShapeFmt(shape)),
        bytes: shape
            .iter()
            .fold(4u128, |b, &d| b.saturating_mul(d as u128)),
    };
    let n = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|n| n.checked_mul(4).is_some())
        .ok_or_else(too_big)?;
    let mut data: Vec<f32> = Vec::new();
    data.try_reserve_exact(n).map_err(|_| too_big())?;
    data.extend(std::iter::repeat_with(fill).take(n));
    Ok(Array::new(shape, data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf larger than any address space is an error naming the
    /// parameter and its size, not an abort.
    #[test]
    fn an_impossible_leaf_is_a_named_error() {
        let err = constant_leaf("0.weight", &[784, usize::MAX / 8], 0.0).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, GraphError::Alloc { .. }), "{msg}");
        assert!(msg.contains("`0.weight`") && msg.contains("784"), "{msg}");
        // Within the address space but beyond any machine's memory: the
        // allocator refuses and the error says how much was asked.
        let err = constant_leaf("w", &[1 << 22, 1 << 26], 0.0).unwrap_err();
        assert!(err.to_string().contains("1.1 PB"), "{err}");
    }

    #[test]
    fn leaves_fill_row_major() {
        let mut k = 0.0;
        let a = leaf("w", &[2, 3], || {
            k += 1.0;
            k
        })
        .unwrap();
        assert_eq!(a.shape(), &[2, 3]);
        assert_eq!(a.to_f32_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }
}
