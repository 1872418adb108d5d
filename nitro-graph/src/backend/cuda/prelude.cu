// nitro CUDA prelude: storage conversions and the counter-based RNG.
// No headers: NVRTC compiles this without the toolkit's include files.
// f16 goes through the PTX cvt instructions (round to nearest even);
// bf16 is converted in integer arithmetic exactly as the `half` crate does.

typedef unsigned short nitro_f16;
typedef unsigned short nitro_bf16;

#ifdef NITRO_HOST_EMULATION
// Host emulation (backend/cuda/emulate.hpp) has no PTX; it converts
// through the host compiler's IEEE half type, with the same rounding.
__device__ __forceinline__ float nitro_f16_to_f32(nitro_f16 h) { return nitro_emu_f16_to_f32(h); }
__device__ __forceinline__ nitro_f16 nitro_f32_to_f16(float f) { return nitro_emu_f32_to_f16(f); }
#else
__device__ __forceinline__ float nitro_f16_to_f32(nitro_f16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ nitro_f16 nitro_f32_to_f16(float f) {
    nitro_f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

__device__ __forceinline__ float nitro_bf16_to_f32(nitro_bf16 h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ nitro_bf16 nitro_f32_to_bf16(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
        return (nitro_bf16)((x >> 16) | 0x0040u);
    }
    if ((x & 0x8000u) != 0u && (x & 0x17FFFu) != 0u) {
        return (nitro_bf16)((x >> 16) + 1u);
    }
    return (nitro_bf16)(x >> 16);
}

// f64 -> f32 rounding to odd, so that a second rounding to f16/bf16 equals
// one direct rounding from f64 (as the CPU's `from_f64` does).
__device__ __forceinline__ float nitro_f64_to_f32_odd(double x) {
    float f = __double2float_rz(x);
    if ((double)f != x && f == f) {
        f = __uint_as_float(__float_as_uint(f) | 1u);
    }
    return f;
}

// Saturating float -> u8 (Rust's `as u8`): NaN -> 0.
__device__ __forceinline__ int nitro_f64_to_u8(double x) {
    return x != x ? 0 : (x <= 0.0 ? 0 : (x >= 255.0 ? 255 : (int)x));
}

// e^x for f32 registers: the CPU's (semantics/exp.rs), the same f64
// sequence in the same order (round by the 1.5*2^52 addition, a degree-8
// Taylor polynomial, 2^n from the exponent bits), every multiply-add an
// explicit fma as the CPU's `mul_add` (one rounding, on the GPU and in host
// emulation alike, where nvcc would contract a * b + c only on the GPU), so
// both match the CPU bit for bit.
__device__ __forceinline__ double nitro_exp_core(double x) {
    const double round = 6755399441055744.0;
    const double c[7] = {1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0,
                         1.0 / 24.0, 1.0 / 6.0, 0.5};
    double t = fma(x, 1.4426950408889634, round);
    double n = t - round;
    double r = fma(-n, 0.6931471805599453, x);
    double p = c[0];
    for (int i = 1; i < 7; i++) p = fma(p, r, c[i]);
    p = fma(fma(p, r, 1.0), r, 1.0);
    unsigned long long nb = (unsigned long long)__double_as_longlong(t)
                            - (unsigned long long)__double_as_longlong(round);
    double scale = __longlong_as_double((long long)((nb + 1023ull) << 52));
    return p * scale;
}

__device__ __forceinline__ float nitro_exp_f32(float xf) {
    double x = xf < -104.0f ? -104.0 : (xf > 89.0f ? 89.0 : (double)xf);
    return (float)nitro_exp_core(x);
}

// tanh for f32 registers: the CPU's (semantics/tanh.rs), 1 - 2/(e^2a + 1)
// from the exp core above, the odd series below 0.2, in the same order.
__device__ __forceinline__ float nitro_tanh_f32(float xf) {
    const double s[5] = {-1382.0 / 155925.0, 62.0 / 2835.0, -17.0 / 315.0, 2.0 / 15.0,
                         -1.0 / 3.0};
    float af = fabsf(xf);
    double a = af > 10.0f ? 10.0 : (double)af;
    double a2 = a * a;
    double p = s[0];
    for (int i = 1; i < 5; i++) p = fma(p, a2, s[i]);
    double small = fma(a * a2, p, a);
    double big = 1.0 - 2.0 / (nitro_exp_core(2.0 * a) + 1.0);
    return copysignf((float)(a < 0.2 ? small : big), xf);
}

// erf for f32 registers: the CPU's (semantics/erf.rs), the same rational
// fit evaluated in double in the same order with the same fmas, so both
// backends (and host emulation) agree bit for bit; erff would differ from
// it by up to 1e-7.
__device__ __forceinline__ float nitro_erf_f32(float xf) {
    const double a[7] = {-2.72614225801306e-10, 2.77068142495902e-8, -2.10102402082508e-6,
                         -5.69250639462346e-5, -7.34990630326855e-4, -2.95459980854025e-3,
                         -1.60960333262415e-2};
    const double b[5] = {-1.45660718464996e-5, -2.13374055278905e-4, -1.68282697438203e-3,
                         -7.37332916720468e-3, -1.42647390514189e-2};
    double x = xf < -4.0f ? -4.0 : (xf > 4.0f ? 4.0 : (double)xf);
    double x2 = x * x;
    double p = a[0];
    for (int i = 1; i < 7; i++) p = fma(p, x2, a[i]);
    double q = b[0];
    for (int i = 1; i < 5; i++) q = fma(q, x2, b[i]);
    // 1/q as the CPU computes it: an f32 division, one Newton step in f64.
    double r0 = (double)(1.0f / (float)q);
    double r = fma(r0, fma(-q, r0, 1.0), r0);
    float y = (float)(x * p * r);
    return y > 1.0f ? 1.0f : (y < -1.0f ? -1.0f : y);
}

// The counter-based generator of backend/cpu (`uniform`): two rounds of
// the SplitMix64 finaliser over (key, salt, index), in integer arithmetic,
// so both backends draw the same stream bit for bit.
__device__ __forceinline__ unsigned long long nitro_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double nitro_uniform(int key, unsigned long long salt,
                                                unsigned long long index) {
    unsigned long long stream =
        nitro_mix((unsigned long long)(unsigned int)key ^ (salt * 0x9E3779B97F4A7C15ULL));
    unsigned long long bits = nitro_mix(stream + index * 0x9E3779B97F4A7C15ULL);
    return (double)(bits >> 40) / 16777216.0;
}
