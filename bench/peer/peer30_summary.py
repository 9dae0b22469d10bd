#!/usr/bin/env python3
"""The compact table of bench/peer/peer30_device.sh: per model shape, blockspec's batch-1 decode against the
copy roofline and its forwards of 1 / 8 / 16 rows (a speculative round's verify against a plain step), beside
llama.cpp's llama-bench on the same weights (GGUF). Reads what the script left in OUT:

  bs_SHAPE.log         backend_bench's `key value` lines (copy_bw_GBps, roofline_tok_s, decode_graph_tok_s ...
                       step_ms ..., forward_rowsN_ms ...)
  lb_SHAPE.json        llama-bench -o json (tests with n_prompt = rows and n_gen = 0; n_gen = 128: decode)

Best-of-samples for llama-bench, as bench/peer/llama_bench_summary.py; medians for blockspec's forwards, as
backend_bench prints them. Roof% of a forward of N rows: the decode roofline's step time over the forward's
time (the weights are read once either way; N rows add compute and N logits rows, which this leaves in the
forward's time). Standard library only.

usage: peer30_summary.py OUT SHAPE...
"""
import json
import os
import sys


def read_bs(path):
    v = {}
    if not os.path.exists(path):
        return v
    for line in open(path):
        f = line.split()
        if len(f) >= 2 and not line.startswith("|"):
            try:
                v[f[0]] = float(f[1])
            except ValueError:
                continue
            if f[0] == "decode_graph_tok_s" and len(f) >= 4:
                v["step_ms"] = float(f[3])
    return v


def read_lb(path):
    """rows -> best ms (n_prompt tests), 'decode' -> best tok/s; the flash-attention setting used."""
    out, fa = {}, None
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return out, fa
    try:
        tests = json.load(open(path))
    except ValueError:
        return out, fa
    for t in tests:
        best = min(t["samples_ns"]) / 1e9
        fa = t.get("flash_attn", fa)
        if t["n_prompt"] and not t["n_gen"]:
            out[t["n_prompt"]] = best * 1e3
        elif t["n_gen"]:
            out["decode"] = t["n_gen"] / best
    return out, fa


def fmt(x, f="%.2f"):
    return f % x if x is not None else "-"


def main():
    out_dir, shapes = sys.argv[1], sys.argv[2:]
    for shape in shapes:
        bs = read_bs(os.path.join(out_dir, "bs_%s.log" % shape))
        lb, fa = read_lb(os.path.join(out_dir, "lb_%s.json" % shape))
        roof = bs.get("roofline_tok_s")
        step_roof_ms = 1e3 / roof if roof else None
        print("== %s: copy %s GB/s, roofline %s tok/s (%s GB weights + %s GB KV at ctx 512 per step)" % (
            shape, fmt(bs.get("copy_bw_GBps"), "%.0f"), fmt(roof, "%.1f"),
            fmt(bs["weight_bytes_per_step"] / 1e9 if "weight_bytes_per_step" in bs else None),
            fmt(bs["kv_bytes_at_ctx"] / 1e9 if "kv_bytes_at_ctx" in bs else None, "%.3f")))
        print("| after 512 tokens | blockspec | llama.cpp%s | blockspec / llama.cpp |" % (
            "" if fa is None else " (flash attn %s)" % {1: "on", 0: "off", -1: "auto"}.get(fa, fa)))
        print("|---|---|---|---|")
        d_bs, d_lb = bs.get("decode_graph_tok_s"), lb.get("decode")
        pct = lambda tps: " (%.1f%%)" % (100 * tps / roof) if tps and roof else ""
        print("| decode tok/s | %s%s | %s%s | %s |" % (fmt(d_bs, "%.1f"), pct(d_bs), fmt(d_lb, "%.1f"), pct(d_lb),
                                                      fmt(d_bs / d_lb if d_bs and d_lb else None, "%.2fx")))
        print("| decode ms/step | %s | %s | |" % (fmt(bs.get("step_ms"), "%.3f"), fmt(1e3 / d_lb if d_lb else None, "%.3f")))
        base = bs.get("forward_rows1_ms")
        for n in (1, 2, 4, 8, 16):
            a, b = bs.get("forward_rows%d_ms" % n), lb.get(n)
            if a is None and b is None:
                continue
            extra = ""
            if a is not None and base and n > 1:
                extra = ", %.2fx of 1 row" % (a / base)
            if a is not None and step_roof_ms:
                extra += ", roof %.0f%%" % (100 * step_roof_ms / a)
            print("| forward %d row%s, ms | %s%s | %s%s | %s |" % (
                n, "s" if n > 1 else "", fmt(a, "%.3f"), extra, fmt(b, "%.3f"),
                " (%.2fx of 1 row)" % (b / lb[1]) if b and lb.get(1) and n > 1 else "",
                fmt(b / a if a and b else None, "%.2fx")))
        if not bs:
            print("(no blockspec figures: see bs_%s.log)" % shape)
        if not lb:
            print("(no llama.cpp figures: see lb_%s.json / llama_bench.err)" % shape)
        print()


if __name__ == "__main__":
    main()
