//! A small seeded host RNG for parameter initialisation (SplitMix64 with
//! Box-Muller normals): deterministic across platforms, no dependencies.

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

    /// `n` values uniform in [-limit, limit).
    pub fn uniform_vec(&mut self, n: usize, limit: f64) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.uniform() * 2.0 - 1.0) * limit) as f32)
            .collect()
    }
}
