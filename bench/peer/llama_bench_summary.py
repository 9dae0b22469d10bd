#!/usr/bin/env python3
"""Summarise llama-bench's JSON output (stdin): the best of each test's samples, one line per test.

usage: llama-bench ... -o json | llama_bench_summary.py [OURS]

OURS (optional): blockspec's figures of the same round, lines "N MS ROOF%" per row count and
"decode TOK/S" (bench/peer/llama_cpp_cpu.sh writes it). With it each line also gives llama.cpp's roof%
against blockspec's roofline of that round (same bytes and multiply-adds counted: blockspec's roof% x
blockspec's time / llama.cpp's time) and how much faster blockspec was.
"""
import json
import sys

ours = {}
if len(sys.argv) > 1:
    for line in open(sys.argv[1]):
        f = line.split()
        ours[f[0]] = (float(f[1]), float(f[2].rstrip("%")) if len(f) > 2 else 0.0)

for t in json.load(sys.stdin):
    n, g, samples = t["n_prompt"], t["n_gen"], t["samples_ns"]
    best = min(samples) / 1e9
    depth = " @ d%d" % t["n_depth"] if t.get("n_depth") else ""
    if n:
        line = "llama.cpp  rows %-3d %8.3f ms %8.1f tok/s  (pp%d%s, KV %s, best of %d)" % (
            n, best * 1e3, n / best, n, depth, t["type_k"], len(samples))
        if str(n) in ours:
            ms, roof = ours[str(n)]
            line += "  roof %.0f%%, blockspec exact %.2fx as fast" % (roof * ms / (best * 1e3), best * 1e3 / ms)
    else:
        line = "llama.cpp  decode %.1f tok/s  (tg%d%s, KV %s, best of %d; mean %.1f)" % (
            g / best, g, depth, t["type_k"], len(samples), t["avg_ts"])
        if "decode" in ours:
            line += "  blockspec exact %.2fx as fast" % (ours["decode"][0] * best / g)
    print(line)
