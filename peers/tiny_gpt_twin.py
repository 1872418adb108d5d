"""PyTorch twin of `nitro-run/examples/tiny_gpt.rs`'s default recipe, for the
"within 5% of PyTorch for the same steps and recipe" check.

    python peers/tiny_gpt_twin.py                 # this repository's *.rs/*.md, default recipe
    python peers/tiny_gpt_twin.py --corpus FILE   # any UTF-8 file or folder (as --set corpus=)

Same as the example, rebuilt here without sharing code:
- corpus: a UTF-8 file, or a folder's *.rs and *.md files (skipping target/, runs/
  and hidden entries) in path order (component-wise, as Rust's Path ordering),
  each followed by a newline;
- vocabulary: '\\n' -> 0, ' '..'}' -> 1..94, anything else -> 95 (96 symbols);
- split: 4096-character blocks, block k goes to val / test / train by SplitMix64's
  finaliser of k+1 modulo 20 (0 val, 1 test); validation and test windows tile
  their blocks at stride `context`, at most 256 kept evenly: exactly the
  example's windows. Training windows: 16000 random offsets inside training
  blocks (the example draws them with ChaCha8, this script with numpy: the
  same distribution, not the same draws);
- model: embedding (normal 0.02) + learned positions (normal 0.02), pre-LN
  causal blocks (fused qkv, 4 heads, exact-GELU MLP 4x, Glorot-uniform
  weights, zero biases), final LayerNorm, untied output projection;
- d 128, 2 layers, context 64, batch 32, one epoch (500 steps, windows
  shuffled, short batch dropped), Adam(2e-3, 0.9, 0.999, 1e-8), constant lr,
  mean next-character cross-entropy.
Prints the unigram entropy and the validation / test bits per character as
JSON lines.
"""
import argparse, json, math, os, time

import numpy as np

MASK64 = (1 << 64) - 1


def char_id(c):
    if c == "\n":
        return 0
    o = ord(c)
    return o - 32 + 1 if 32 <= o <= 125 else 95


def corpus_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not (x in ("target", "runs") or x.startswith("."))]
        for f in files:
            if f.startswith("."):
                continue
            if f.endswith(".rs") or f.endswith(".md"):
                out.append(os.path.join(d, f))
    return sorted(out, key=lambda p: [c for c in p.split(os.sep) if c not in ("", ".")])


def read_corpus(path):
    if not os.path.isdir(path):
        return open(path, encoding="utf-8").read()
    return "".join(open(f, encoding="utf-8").read() + "\n" for f in corpus_files(path))


def block_split(k, every):
    z = ((k + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    r = (z ^ (z >> 31)) % every
    return 1 if r == 0 else 2 if r == 1 else 0


def splits(ids, t, block, every, n_train, max_eval, rng):
    blocks = ([], [], [])
    for k, s in enumerate(range(0, len(ids), block)):
        e = min(s + block, len(ids))
        if e - s > t:
            blocks[block_split(k, every)].append((s, e))
    train = blocks[0]
    starts = []
    for _ in range(n_train):
        s, e = train[rng.integers(len(train))]
        starts.append(int(rng.integers(s, e - t)))

    def tiles(b):
        allw = [s for (s0, e) in b for s in range(s0, e - t, t)]
        keep = max(1, min(max_eval, len(allw)))
        return [allw[i * len(allw) // keep] for i in range(keep)]

    return starts, tiles(blocks[1]), tiles(blocks[2])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=os.path.join(here, ".."))
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--train-windows", type=int, default=16000)
    ap.add_argument("--eval-windows", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    ids = np.array([char_id(c) for c in read_corpus(a.corpus)], dtype=np.int64)
    counts = np.bincount(ids, minlength=96)
    p = counts[counts > 0] / len(ids)
    unigram = float(-(p * np.log2(p)).sum())
    print(json.dumps({"record": "corpus", "chars": len(ids), "unigram_bits": round(unigram, 4)}), flush=True)
    t, d, h, L, V = a.context, a.dim, a.heads, a.layers, 96
    tr, va, te = splits(ids, t, 4096, 20, a.train_windows, a.eval_windows, rng)

    def windows(starts):
        s = np.asarray(starts)[:, None] + np.arange(t + 1)[None, :]
        w = torch.from_numpy(ids[s])
        return w[:, :t], w[:, 1:]

    def glorot(i, o):
        lim = math.sqrt(6.0 / (i + o))
        return torch.empty(i, o).uniform_(-lim, lim).requires_grad_()

    def zeros(n):
        return torch.zeros(n, requires_grad=True)

    def ones(n):
        return torch.ones(n, requires_grad=True)

    P = {"wte": (torch.randn(V, d) * 0.02).requires_grad_(), "wpe": (torch.randn(t, d) * 0.02).requires_grad_()}
    for l in range(L):
        P.update({f"{l}.ln1g": ones(d), f"{l}.ln1b": zeros(d), f"{l}.wqkv": glorot(d, 3 * d), f"{l}.bqkv": zeros(3 * d),
                  f"{l}.wo": glorot(d, d), f"{l}.bo": zeros(d), f"{l}.ln2g": ones(d), f"{l}.ln2b": zeros(d),
                  f"{l}.w1": glorot(d, 4 * d), f"{l}.b1": zeros(4 * d), f"{l}.w2": glorot(4 * d, d), f"{l}.b2": zeros(d)})
    P.update({"lnfg": ones(d), "lnfb": zeros(d), "wout": glorot(d, V), "bout": zeros(V)})

    def forward(x):
        b, tt = x.shape
        z = P["wte"][x] + P["wpe"][:tt]
        for l in range(L):
            y = F.layer_norm(z, (d,), P[f"{l}.ln1g"], P[f"{l}.ln1b"], 1e-5)
            q, k, v = (y @ P[f"{l}.wqkv"] + P[f"{l}.bqkv"]).split(d, dim=-1)
            q, k, v = (u.view(b, tt, h, d // h).transpose(1, 2) for u in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, tt, d)
            z = z + y @ P[f"{l}.wo"] + P[f"{l}.bo"]
            y = F.layer_norm(z, (d,), P[f"{l}.ln2g"], P[f"{l}.ln2b"], 1e-5)
            z = z + F.gelu(y @ P[f"{l}.w1"] + P[f"{l}.b1"]) @ P[f"{l}.w2"] + P[f"{l}.b2"]
        z = F.layer_norm(z, (d,), P["lnfg"], P["lnfb"], 1e-5)
        return z @ P["wout"] + P["bout"]

    def bpc(starts):
        x, y = windows(starts)
        with torch.no_grad():
            tot = 0.0
            for i in range(0, len(x), a.batch):
                lg = forward(x[i:i + a.batch])
                tot += float(F.cross_entropy(lg.reshape(-1, V), y[i:i + a.batch].reshape(-1), reduction="sum"))
        return tot / (y.numel() * math.log(2))

    opt = torch.optim.Adam(P.values(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    xt, yt = windows(tr)
    steps, t0 = 0, time.time()
    for _ in range(a.epochs):
        order = torch.from_numpy(rng.permutation(len(tr)))
        for i in range(0, len(tr) - a.batch + 1, a.batch):
            idx = order[i:i + a.batch]
            loss = F.cross_entropy(forward(xt[idx]).reshape(-1, V), yt[idx].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            if steps % 100 == 0:
                print(json.dumps({"record": "train", "step": steps, "loss": round(float(loss), 4)}), flush=True)
    print(json.dumps({"record": "result", "framework": "torch", "version": torch.__version__, "steps": steps,
                      "train_s": round(time.time() - t0, 1), "val_bpc": round(bpc(va), 4),
                      "test_bpc": round(bpc(te), 4), "unigram_bits": round(unigram, 4)}), flush=True)


if __name__ == "__main__":
    main()
