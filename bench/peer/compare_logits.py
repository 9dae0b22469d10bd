#!/usr/bin/env python3
"""Compares `blockspec dump` (prefill_logits, greedy_ids, greedy_step_logits) with llama_cpp_logits.cpp's output
for the same prompt ids: per row the largest |difference| against the row's spread (max - min), and whether the
greedy ids agree. The GGUF is judged read like the checkpoint when every row's difference is small against its
spread (bf16 weights, fp32 vs llama.cpp's own accumulation order: ~1e-3 of the spread, not 1e-1) and the ids
agree. Standard library only.

usage: compare_logits.py DUMP.safetensors LLAMA.f32 LLAMA_IDS [TOLERANCE]
"""
import json
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            fmt = {"F32": "f", "I32": "i"}[v["dtype"]]
            out[k] = (v["shape"], struct.unpack("<%d%s" % (len(raw) // 4, fmt), raw))
        return out


def main():
    dump, lfile, lids = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",") if x]
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-2
    t = read_st(dump)
    (n, V), pre = t["prefill_logits"]
    rows = [pre[i * V:(i + 1) * V] for i in range(n)]
    names = ["prompt row %d" % i for i in range(n)]
    if "greedy_step_logits" in t:
        (g, _), st = t["greedy_step_logits"]
        rows += [st[i * V:(i + 1) * V] for i in range(g)]
        names += ["greedy step %d" % i for i in range(g)]
    raw = open(lfile, "rb").read()
    theirs = struct.unpack("<%df" % (len(raw) // 4), raw)
    if len(theirs) != len(rows) * V:
        sys.exit("compare_logits: %s holds %d floats, expected %d rows of %d" % (lfile, len(theirs), len(rows), V))
    worst = 0.0
    for i, (name, a) in enumerate(zip(names, rows)):
        b = theirs[i * V:(i + 1) * V]
        d = max(abs(x - y) for x, y in zip(a, b))
        spread = max(a) - min(a)
        am, bm = max(range(V), key=a.__getitem__), max(range(V), key=b.__getitem__)
        worst = max(worst, d / spread if spread else d)
        print("%-14s max|diff| %.3g, spread %.3g (%.2g of it), argmax %d / %d%s" % (
            name, d, spread, d / spread if spread else 0, am, bm, "" if am == bm else "  DIFFERENT"))
    ours = list(t["greedy_ids"][1]) if "greedy_ids" in t else []
    same = ours == lids[:len(ours)]
    print("greedy ids: blockspec %s, llama.cpp %s: %s" % (ours, lids, "same" if same else "DIFFERENT"))
    ok = same and worst <= tol
    print("%s (worst difference %.2g of a row's spread, tolerance %.2g)" % ("AGREE" if ok else "DISAGREE", worst, tol))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
