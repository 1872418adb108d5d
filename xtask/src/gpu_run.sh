#!/usr/bin/env bash
# nitro's GPU checks from a bundle made by `cargo xtask gpu-bundle`: the
# CUDA test binaries and the GPU benchmark, built elsewhere, so the GPU
# machine needs no Rust toolchain (only the driver, NVRTC and cuBLAS).
#   bash target/gpu-bundle/run.sh        # logs and JSON lines go to $OUT (or ./out)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"

# cudarc loads libnvrtc/libcublas/libcublasLt/libnccl by name: put the
# folders that hold them on the path, and link a versioned-only file
# (libnvrtc.so.13, libnccl.so.2 from libnccl2 or the nvidia-nccl wheel) to the
# plain name it looks for.
links="$here/cuda-libs"
mkdir -p "$links"
dirs="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu"
for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$sp"/nvidia/*/lib; do [ -d "$d" ] && dirs="$dirs $d"; done
done
path="$links"
for lib in nvrtc cublas cublasLt nccl; do
    found=""
    for d in $dirs; do
        if [ -e "$d/lib$lib.so" ]; then found="$d/lib$lib.so"; break; fi
    done
    if [ -z "$found" ]; then
        for d in $dirs; do
            f=$(ls "$d/lib$lib.so."* 2>/dev/null | head -n 1)
            if [ -n "$f" ]; then found="$f"; ln -sf "$f" "$links/lib$lib.so"; break; fi
        done
    fi
    echo "lib$lib.so: ${found:-not found}"
    [ -n "$found" ] && path="$path:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# Every test binary's output goes to one log (the device tool returns at
# most 8 files); the summary shows failures, skips and each result line.
status=0
: >"$out/tests.log"
for test in "$here"/tests/*; do
    name=$(basename "$test")
    echo "=== $name" | tee -a "$out/tests.log"
    "$test" --nocapture --test-threads 4 >"$out/current.log" 2>&1
    code=$?
    cat "$out/current.log" >>"$out/tests.log"
    grep -E 'FAILED|panicked|skipped|test result' "$out/current.log" | tail -n 30
    echo "=== $name: exit $code" | tee -a "$out/tests.log"
    [ "$code" = 0 ] || status=1
done
rm -f "$out/current.log"
echo "=== bench_gpu"
"$here/bench_gpu" 2>"$out/bench_gpu.err" | tee "$out/bench_gpu.jsonl" || status=1
tail -n 5 "$out/bench_gpu.err"
echo "=== done (status $status); logs in $out"
exit $status
