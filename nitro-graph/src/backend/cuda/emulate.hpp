// nitro host emulation of the CUDA dialect the code generator emits.
//
// The generated module is compiled by the host C++ compiler with this
// header in front of it, and every kernel runs on the CPU with the grid it
// would be launched with on a GPU. Kernels without block-level
// cooperation run their threads one after another; kernels that call
// __syncthreads or warp shuffles run one host thread per CUDA thread,
// with real barriers, so the reduction schemes execute as written.
//
// Only what the generator uses is defined here. An intrinsic missing from
// this file is a compile error in emulation, the same signal NVRTC gives.

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#define NITRO_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct nitro_dim3 {
    unsigned x, y, z;
};
thread_local nitro_dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---- bit casts -------------------------------------------------------
template <class To, class From> inline To nitro_bits(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit cast of equal sizes");
    To t;
    std::memcpy(&t, &v, sizeof(To));
    return t;
}
inline float __int_as_float(int x) { return nitro_bits<float>(x); }
inline float __uint_as_float(unsigned int x) { return nitro_bits<float>(x); }
inline unsigned int __float_as_uint(float x) { return nitro_bits<unsigned int>(x); }
inline double __longlong_as_double(long long x) { return nitro_bits<double>(x); }
inline long long __double_as_longlong(double x) { return nitro_bits<long long>(x); }

// ---- conversions with CUDA's rounding and saturation ------------------
inline float __double2float_rz(double x) {
    float f = (float)x;
    if (std::isfinite(x) && std::fabs((double)f) > std::fabs(x)) {
        f = std::nextafter(f, 0.0f);
    }
    return f;
}
template <class I> inline I nitro_saturate(double x) {
    if (x != x) return 0;
    const double t = std::trunc(x);
    if (t <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (t >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)t;
}
inline int __float2int_rz(float x) { return nitro_saturate<int>(x); }
inline int __double2int_rz(double x) { return nitro_saturate<int>(x); }
inline long long __float2ll_rz(float x) { return nitro_saturate<long long>(x); }
inline long long __double2ll_rz(double x) { return nitro_saturate<long long>(x); }

// f16 <-> f32 through the compiler's IEEE half type (round to nearest even),
// standing in for the PTX cvt instructions of the prelude.
inline float nitro_emu_f16_to_f32(unsigned short h) { return (float)nitro_bits<_Float16>(h); }
inline unsigned short nitro_emu_f32_to_f16(float f) {
    return nitro_bits<unsigned short>((_Float16)f);
}

// ---- atomics (threads of a non-cooperative kernel run one at a time) ---
template <class T> inline T atomicAdd(T* address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}

// ---- block cooperation -------------------------------------------------
struct nitro_team {
    std::barrier<> block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<unsigned long long> lanes;
    explicit nitro_team(unsigned threads)
        : block(threads), lanes((threads + 31) / 32 * 32) {
        for (unsigned w = 0; w * 32 < threads; ++w) {
            const unsigned members = threads - w * 32 < 32 ? threads - w * 32 : 32;
            warps.emplace_back(std::make_unique<std::barrier<>>(members));
        }
    }
};
thread_local nitro_team* nitro_current_team = nullptr;

inline void __syncthreads() { nitro_current_team->block.arrive_and_wait(); }

template <class T> inline T __shfl_down_sync(unsigned /*mask*/, T value, int delta) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 64 bits");
    nitro_team& team = *nitro_current_team;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long& slot = team.lanes[threadIdx.x];
    std::memcpy(&slot, &value, sizeof(T));
    team.warps[warp]->arrive_and_wait();
    T out = value;
    const unsigned from = lane + (unsigned)delta;
    if (from < 32 && warp * 32 + from < blockDim.x) {
        std::memcpy(&out, &team.lanes[warp * 32 + from], sizeof(T));
    }
    team.warps[warp]->arrive_and_wait();
    return out;
}

// ---- launching -------------------------------------------------------
// Run `kernel` over `grid` blocks of `block` threads.
inline void nitro_emu_launch(unsigned grid, unsigned block, bool cooperative,
                             const std::function<void()>& kernel) {
    if (!cooperative) {
        for (unsigned b = 0; b < grid; ++b) {
            for (unsigned t = 0; t < block; ++t) {
                blockIdx = {b, 0, 0};
                threadIdx = {t, 0, 0};
                gridDim = {grid, 1, 1};
                blockDim = {block, 1, 1};
                kernel();
            }
        }
        return;
    }
    nitro_team team(block);
    std::vector<std::thread> threads;
    threads.reserve(block);
    for (unsigned t = 0; t < block; ++t) {
        threads.emplace_back([&, t] {
            nitro_current_team = &team;
            gridDim = {grid, 1, 1};
            blockDim = {block, 1, 1};
            threadIdx = {t, 0, 0};
            for (unsigned b = 0; b < grid; ++b) {
                blockIdx = {b, 0, 0};
                kernel();
                // Blocks own their shared memory on a GPU; here they share
                // one static array, so a block starts only after the last.
                team.block.arrive_and_wait();
            }
        });
    }
    for (auto& th : threads) th.join();
}
