#!/usr/bin/env python3
"""Check a GGUF written by gguf_from_safetensors.py against what llama.cpp's loader reads, without llama.cpp:
a GGUF reader (standard library only) and, per architecture, the keys the loader requires and the tensors it
creates with the shapes it expects, re-derived from the keys the way llama.cpp does (src/llama-model.cpp
load_hparams, src/models/{llama,qwen3,gemma4}.cpp at commit 80fb11a). Also checks the data section: every
tensor's offset aligned, inside the file, and no tensor overlapping the next. Exit status 1 on any problem.

usage: gguf_check.py FILE.gguf [--dump]
"""
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
TYPE_SIZE = {0: 4, 1: 2, 30: 2}   # F32, F16, BF16 (the only types the converter writes)


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        n = struct.calcsize(fmt)
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("file ends inside the header")
        return struct.unpack(fmt, b)[0]

    def string(self):
        return self.f.read(self.take("<Q")).decode("utf-8")

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return ("array", et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def read_gguf(path):
    with open(path, "rb") as f:
        r = Reader(f)
        if f.read(4) != b"GGUF":
            raise ValueError("not a GGUF file")
        version, n_t, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
        kv = {}
        for _ in range(n_kv):
            k = r.string()
            t = r.take("<I")
            kv[k] = (t, r.value(t))
        tensors = []
        for _ in range(n_t):
            name = r.string()
            dims = [r.take("<Q") for _ in range(r.take("<I"))]
            tensors.append((name, dims, r.take("<I"), r.take("<Q")))
        align = kv.get("general.alignment", (4, 32))[1]
        data = (f.tell() + align - 1) // align * align
        f.seek(0, 2)
        return version, kv, tensors, data, align, f.tell()


def main():
    path = sys.argv[1]
    version, kv, tensors, data, align, size = read_gguf(path)
    problems = []

    def val(key, default=None, required=True):
        if key in kv:
            return kv[key][1]
        if required:
            problems.append("key %s missing (the loader requires it)" % key)
        return default

    def arr_or_scalar(key, n, default):
        v = val(key, None, required=False)
        if v is None:
            return [default] * n
        if isinstance(v, tuple):
            if len(v[2]) != n:
                problems.append("%s has %d entries, block_count is %d" % (key, len(v[2]), n))
            return list(v[2]) + [v[2][-1]] * (n - len(v[2]))
        return [v] * n

    arch = val("general.architecture")
    A = arch + "."
    n_embd = val(A + "embedding_length")
    L = val(A + "block_count")
    val(A + "context_length")
    val(A + "attention.layer_norm_rms_epsilon")
    n_head = arr_or_scalar(A + "attention.head_count", L, 0)
    n_kv = arr_or_scalar(A + "attention.head_count_kv", L, n_head[0])
    n_ff = arr_or_scalar(A + "feed_forward_length", L, 0)
    hk_full = val(A + "attention.key_length", n_embd // n_head[0], required=False)
    hv_full = val(A + "attention.value_length", n_embd // n_head[0], required=False)
    tokens = val("tokenizer.ggml.tokens")
    n_vocab = len(tokens[2]) if tokens else 0
    for k in ("tokenizer.ggml.model", "tokenizer.ggml.merges"):
        val(k)
    want = {}   # name -> dims (ggml order), or None: optional

    def t(name, *dims, optional=False):
        want[name] = (list(dims), optional)

    t("token_embd.weight", n_embd, n_vocab)
    t("output_norm.weight", n_embd)
    t("output.weight", n_embd, n_vocab, optional=True)
    if arch in ("llama", "qwen3"):
        n_rot = val(A + "rope.dimension_count", hk_full, required=False)
        if arch == "llama" and n_rot != hk_full:
            problems.append("rope.dimension_count %s != head size %s (the LLAMA loader throws)" % (n_rot, hk_full))
        if arch == "llama":
            t("rope_freqs.weight", n_rot // 2, optional=True)
        for i in range(L):
            b = "blk.%d." % i
            t(b + "attn_norm.weight", n_embd)
            t(b + "attn_q.weight", n_embd, hk_full * n_head[i])
            t(b + "attn_k.weight", n_embd, hk_full * n_kv[i])
            t(b + "attn_v.weight", n_embd, hv_full * n_kv[i])
            t(b + "attn_output.weight", hk_full * n_head[i], n_embd)
            if arch == "qwen3":
                t(b + "attn_q_norm.weight", hk_full)
                t(b + "attn_k_norm.weight", hk_full)
            t(b + "ffn_norm.weight", n_embd)
            t(b + "ffn_gate.weight", n_embd, n_ff[i])
            t(b + "ffn_up.weight", n_embd, n_ff[i])
            t(b + "ffn_down.weight", n_ff[i], n_embd)
    elif arch == "gemma4":
        swa = val(A + "attention.sliding_window_pattern")
        swa = [bool(x) for x in swa[2]] if isinstance(swa, tuple) else [bool(swa)] * L
        if len(swa) != L:
            problems.append("sliding_window_pattern has %d entries, block_count is %d" % (len(swa), L))
        val(A + "attention.sliding_window")
        ple = val(A + "embedding_length_per_layer_input", 0)
        hk_swa, hv_swa = val(A + "attention.key_length_swa"), val(A + "attention.value_length_swa")
        if hk_full != hv_full or hk_swa != hv_swa:
            problems.append("Gemma 4 requires key_length == value_length (full and swa)")
        shared = val(A + "attention.shared_kv_layers", 0, required=False)
        rot_full = val(A + "rope.dimension_count", hk_full, required=False)
        if ple:
            t("per_layer_token_embd.weight", ple * L, n_vocab)
            t("per_layer_model_proj.weight", n_embd, ple * L)
            t("per_layer_proj_norm.weight", ple)
        seen_full = False
        for i in range(L):
            b = "blk.%d." % i
            hd = hk_swa if swa[i] else hk_full
            has_kv = i < L - shared
            t(b + "attn_norm.weight", n_embd)
            t(b + "attn_q.weight", n_embd, hd * n_head[i])
            t(b + "attn_k.weight", n_embd, hd * n_kv[i], optional=not has_kv)
            t(b + "attn_v.weight", n_embd, hd * n_kv[i], optional=True)
            t(b + "attn_output.weight", hd * n_head[i], n_embd)
            t(b + "attn_q_norm.weight", hd)
            t(b + "attn_k_norm.weight", hd, optional=not has_kv)
            t(b + "post_attention_norm.weight", n_embd)
            t(b + "layer_output_scale.weight", 1, optional=True)
            if not swa[i] and not seen_full:
                t("rope_freqs.weight", rot_full // 2)   # required by the first full layer
                seen_full = True
            t(b + "ffn_norm.weight", n_embd)
            t(b + "ffn_gate.weight", n_embd, n_ff[i])
            t(b + "ffn_up.weight", n_embd, n_ff[i])
            t(b + "ffn_down.weight", n_ff[i], n_embd)
            t(b + "post_ffw_norm.weight", n_embd)
            if ple:
                t(b + "inp_gate.weight", n_embd, ple)
                t(b + "proj.weight", ple, n_embd)
                t(b + "post_norm.weight", n_embd)
    else:
        problems.append("architecture %r: no checks written" % arch)

    have = {name: (dims, gtype, off) for name, dims, gtype, off in tensors}
    for name, (dims, optional) in want.items():
        if name not in have:
            if not optional:
                problems.append("tensor %s missing" % name)
        elif have[name][0] != dims:
            problems.append("tensor %s has dims %s, the loader expects %s" % (name, have[name][0], dims))
    for name in have:
        if name not in want:
            problems.append("tensor %s is not one the loader creates (it would count as unused)" % name)
    spans = []
    for name, dims, gtype, off in tensors:
        if gtype not in TYPE_SIZE:
            problems.append("tensor %s: type %d" % (name, gtype))
            continue
        n = 1
        for d in dims:
            n *= d
        if off % align:
            problems.append("tensor %s: offset %d not aligned to %d" % (name, off, align))
        spans.append((data + off, data + off + n * TYPE_SIZE[gtype], name))
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if a1 > b0:
            problems.append("tensors %s and %s overlap" % (an, bn))
    if spans and spans[-1][1] > size:
        problems.append("tensor %s ends past the file (%d > %d)" % (spans[-1][2], spans[-1][1], size))

    if "--dump" in sys.argv:
        for k, (tp, v) in kv.items():
            if isinstance(v, tuple):
                v = "[%d x type %d] %s" % (len(v[2]), v[1], v[2][:8] if v[1] != 8 else v[2][:3])
            print("  %s = %s" % (k, v))
    print("%s: GGUF v%d, %s, %d keys, %d tensors (%d the loader creates; %d optional absent): %s" % (
        path, version, arch, len(kv), len(tensors), len(want), sum(1 for n, (d, o) in want.items() if o and n not in have),
        "OK" if not problems else "%d problem(s)" % len(problems)))
    for p in problems:
        print("  " + p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
