"""Each matrix product of the MLP and GPT train steps, timed with torch (MKL
on the CPU) beside nitro's figure for it, to say which products trail the
BLAS the peers use, and by how much:

    target/release/examples/bench_graph matmul_shapes | python peers/matmul_shapes.py

Reads the JSON lines of `bench_graph matmul_shapes` on stdin (one product each:
batch, m, k, n, ta, tb, nitro's median_ms, threads) and prints each line again
with `torch_ms`, `torch_gflops` and `ratio_vs_torch` (nitro's time / torch's)
added. Operands have nitro's layouts: a transposed operand is a transposed view
(torch.mm on a strided view, as a step would hand it over). torch runs on the
line's thread count; the median of 30 calls after 5 warm-up calls, the same
counts as nitro's side. It reads all of stdin before it imports torch or times
anything, so the two sides never share the cores.
"""
import json
import sys
import time


def operand(torch, batch, rows, cols, transposed):
    """A [batch,] rows x cols operand, as a transposed view when `transposed`."""
    shape = (cols, rows) if transposed else (rows, cols)
    x = torch.rand((batch,) + shape if batch > 1 else shape)
    return x.transpose(-1, -2) if transposed else x


def torch_ms(torch, r):
    b, m, k, n = r["batch"], r["m"], r["k"], r["n"]
    a = operand(torch, b, m, k, r["ta"])
    w = operand(torch, b, k, n, r["tb"])
    out = torch.empty((b, m, n) if b > 1 else (m, n))
    mm = (lambda: torch.bmm(a, w, out=out)) if b > 1 else (lambda: torch.mm(a, w, out=out))
    for _ in range(5):
        mm()
    times = []
    for _ in range(30):
        t = time.perf_counter()
        mm()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    # All of nitro's lines first: timing while the bench still runs would
    # share the cores with it.
    lines = [l.strip() for l in sys.stdin.read().splitlines()]
    rows = [json.loads(l) for l in lines if l.startswith("{")]
    # Importing torch takes seconds of CPU: only after nitro's side is done.
    import torch

    for r in rows:
        if r.get("bench") != "matmul_shapes":
            continue
        torch.set_num_threads(r["threads"])
        ms = torch_ms(torch, r)
        flop = 2.0 * r["batch"] * r["m"] * r["k"] * r["n"]
        r["torch_ms"] = round(ms, 4)
        r["torch_gflops"] = round(flop / (ms * 1e-3) / 1e9, 1)
        r["ratio_vs_torch"] = round(r["median_ms"] / ms, 3)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
