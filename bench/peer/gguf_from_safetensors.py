#!/usr/bin/env python3
"""Write a GGUF file of a Qwen3, Llama or Gemma-4 (text) safetensors checkpoint, so llama.cpp (the peer) can be
benchmarked on the very weights blockspec runs.

Only for benchmarks: the vocabulary written is a placeholder (the 256 byte-level tokens, then unique filler
names), because `make-random` checkpoints have no tokenizer and llama-bench feeds random ids. Matrices keep
their stored dtype (BF16 stays BF16); 1-D tensors (norms, Gemma-4's layer_scalar) are widened to F32, as
llama.cpp's own converter does. Standard library only (CI hosts and the GPU machine have no numpy / torch).

What each architecture needs was read from llama.cpp's loader (src/llama-model.cpp load_hparams,
src/models/{llama,qwen3,gemma4}.cpp load_arch_hparams / load_arch_tensors) and its converter
(conversion/{llama,gemma}.py), at the version benchmarked (node-llama-cpp@3.21.1's bundle, commit 80fb11a):

  llama   llama.cpp's LLAMA graph uses the interleaved ("NORM") RoPE, HF checkpoints the rotate-half layout, so
          q_proj / k_proj rows are permuted per head (llama.cpp's converter does the same); llama3 RoPE
          scaling travels as the `rope_freqs.weight` tensor of per-pair divisors (not as keys).
  gemma4  sliding / full layers differ in head size (`key_length` = full, `key_length_swa` = sliding) and K/V
          heads (`head_count_kv` per layer); `sliding_window_pattern` marks the sliding layers; full layers'
          proportional RoPE is a NeoX rotation over the whole head with divisors 1 for the turning pairs and
          1e30 for the still ones (`rope_freqs.weight`, required on the first full layer); no v_proj under
          attention_k_eq_v (llama.cpp then uses K as V); norms stored as is (Gemma-4 multiplies by w, unlike
          Gemma 2/3's 1 + w); embedding scale and soft-cap are applied by llama.cpp itself.

usage: gguf_from_safetensors.py CHECKPOINT_DIR OUT.gguf
"""
import json
import math
import os
import struct
import sys

GGUF_TYPE = {"F32": 0, "F16": 1, "BF16": 30}          # ggml_type ids
KV_U32, KV_I32, KV_F32, KV_BOOL, KV_STRING, KV_ARRAY = 4, 5, 6, 7, 8, 9
ALIGN = 32
FTYPE_MOSTLY_BF16 = 32                                 # llama_ftype: every matrix BF16, 1-D tensors F32


def fail(msg):
    sys.exit("gguf_from_safetensors: " + msg)


def read_safetensors(directory):
    """name -> (file, dtype, shape, start, end) over single-file and sharded checkpoints."""
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    tensors = {}
    for name in files:
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for t, info in header.items():
            if t == "__metadata__":
                continue
            a, b = info["data_offsets"]
            tensors[t] = (path, info["dtype"], info["shape"], 8 + n + a, 8 + n + b)
    return tensors


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (byte-level BPE vocabularies start with these)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def special_id(cfg, key, vocab):
    """config.json's bos/eos id (null, a list, or absent in some checkpoints), kept inside the vocabulary."""
    v = cfg.get(key)
    if isinstance(v, list):
        v = v[0] if v else None
    return v if isinstance(v, int) and 0 <= v < vocab else vocab - 1


def pack_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_kv(key, vtype, value):
    out = pack_str(key) + struct.pack("<I", vtype)
    if vtype == KV_U32:
        return out + struct.pack("<I", value)
    if vtype == KV_F32:
        return out + struct.pack("<f", value)
    if vtype == KV_STRING:
        return out + pack_str(value)
    etype, items = value
    out += struct.pack("<IQ", etype, len(items))
    if etype == KV_STRING:
        return out + b"".join(pack_str(s) for s in items)
    if etype == KV_BOOL:
        return out + bytes(1 if x else 0 for x in items)
    return out + struct.pack("<%d%s" % (len(items), {KV_I32: "i", KV_U32: "I", KV_F32: "f"}[etype]), *items)


def rope_theta(cfg):
    return float(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)))


def llama3_rope_divisors(cfg, head_dim):
    """Llama 3.1's RoPE scaling as llama.cpp takes it: one divisor per rotated pair (rope_freqs.weight), None when
    the checkpoint has no llama3 scaling. Same formula as transformers' _compute_llama3_parameters (float64
    here; llama.cpp's converter uses float32, which can only move a pair sitting exactly on a band edge)."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if str(rs.get("rope_type", rs.get("type", ""))).lower() != "llama3":
        return None
    base = rope_theta(cfg)
    factor, lo, hi = rs.get("factor", 8.0), rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    lo_wavelen, hi_wavelen = old / lo, old / hi
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < hi_wavelen:
            out.append(1.0)
        elif wavelen > lo_wavelen:
            out.append(float(factor))
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return out


class Plan:
    """The GGUF being assembled: key/values and tensors (name, dims innermost first, ggml type, source)."""

    def __init__(self, arch):
        self.arch, self.kvs, self.tensors = arch, [], []

    def kv(self, key, vtype, value):
        self.kvs.append((key.replace("{arch}", self.arch), vtype, value))

    def from_checkpoint(self, name, src, permute_heads=0):
        """A checkpoint tensor; permute_heads > 0: reorder each head's rows from rotate-half to interleaved."""
        path, dtype, shape, a, b = src
        if dtype not in GGUF_TYPE:
            fail("%s has dtype %s, expected BF16, F16 or F32" % (name, dtype))
        widen = len(shape) == 1 and dtype == "BF16"
        self.tensors.append((name, list(reversed(shape)), 0 if widen else GGUF_TYPE[dtype],
                             ("file", path, a, b, widen, permute_heads, shape), (b - a) * (2 if widen else 1)))

    def from_floats(self, name, values):
        self.tensors.append((name, [len(values)], 0, ("f32", values), 4 * len(values)))


def copy_tensor(out, src):
    """Streams one checkpoint tensor into out (widening bf16 -> f32, or permuting head rows)."""
    if src[0] == "f32":
        out.write(struct.pack("<%df" % len(src[1]), *src[1]))
        return
    _, path, a, b, widen, heads, shape = src
    with open(path, "rb") as f:
        f.seek(a)
        if heads:
            # rows of one head: [first halves' rows, second halves' rows] -> pairs (j, hd/2 + j) adjacent,
            # i.e. llama.cpp's LlamaModel.permute (reshape(n_head, 2, hd/2, H).swapaxes(1, 2))
            row = (b - a) // shape[0]
            hd = shape[0] // heads
            for _ in range(heads):
                blk = f.read(row * hd)
                if len(blk) != row * hd:
                    fail("%s: ends inside a tensor" % path)
                half = hd // 2
                out.write(b"".join(blk[(a_ * half + j) * row:(a_ * half + j + 1) * row] for j in range(half) for a_ in (0, 1)))
            return
        left = b - a
        while left:
            chunk = f.read(min(left, 64 << 20))
            if not chunk:
                fail("%s: ends inside a tensor" % path)
            left -= len(chunk)
            if widen:   # bf16 -> f32: the 16 bits become the top half of the float
                chunk = b"".join(b"\0\0" + chunk[j:j + 2] for j in range(0, len(chunk), 2))
            out.write(chunk)


def need(tensors, name, what):
    if name not in tensors:
        fail("tensor %s missing (%s)" % (name, what))
    return tensors[name]


def plan_qwen3_llama(cfg, tensors, arch):
    p = Plan(arch)
    n_head, H, L = cfg["num_attention_heads"], cfg["hidden_size"], cfg["num_hidden_layers"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or H // n_head
    p.kv("{arch}.context_length", KV_U32, cfg.get("max_position_embeddings", 40960))
    p.kv("{arch}.embedding_length", KV_U32, H)
    p.kv("{arch}.block_count", KV_U32, L)
    p.kv("{arch}.feed_forward_length", KV_U32, cfg["intermediate_size"])
    p.kv("{arch}.attention.head_count", KV_U32, n_head)
    p.kv("{arch}.attention.head_count_kv", KV_U32, n_kv)
    p.kv("{arch}.attention.key_length", KV_U32, head_dim)
    p.kv("{arch}.attention.value_length", KV_U32, head_dim)
    p.kv("{arch}.rope.freq_base", KV_F32, rope_theta(cfg))
    p.kv("{arch}.attention.layer_norm_rms_epsilon", KV_F32, float(cfg.get("rms_norm_eps", 1e-6)))
    if arch == "llama":
        # the loader throws unless n_rot == head size for LLAMA; vocab_size spares it counting the token list
        p.kv("{arch}.rope.dimension_count", KV_U32, head_dim)
        p.kv("{arch}.vocab_size", KV_U32, cfg["vocab_size"])

    p.from_checkpoint("token_embd.weight", need(tensors, "model.embed_tokens.weight", "embedding"))
    for i in range(L):
        pre, blk = "model.layers.%d." % i, "blk.%d." % i
        p.from_checkpoint(blk + "attn_norm.weight", need(tensors, pre + "input_layernorm.weight", "layer"))
        # llama: rotate-half -> interleaved rows (llama.cpp's LLAMA graph rotates adjacent pairs); Qwen3 is NeoX
        p.from_checkpoint(blk + "attn_q.weight", need(tensors, pre + "self_attn.q_proj.weight", "layer"), n_head if arch == "llama" else 0)
        p.from_checkpoint(blk + "attn_k.weight", need(tensors, pre + "self_attn.k_proj.weight", "layer"), n_kv if arch == "llama" else 0)
        p.from_checkpoint(blk + "attn_v.weight", need(tensors, pre + "self_attn.v_proj.weight", "layer"))
        p.from_checkpoint(blk + "attn_output.weight", need(tensors, pre + "self_attn.o_proj.weight", "layer"))
        if arch == "qwen3":
            p.from_checkpoint(blk + "attn_q_norm.weight", need(tensors, pre + "self_attn.q_norm.weight", "Qwen3 q-norm"))
            p.from_checkpoint(blk + "attn_k_norm.weight", need(tensors, pre + "self_attn.k_norm.weight", "Qwen3 k-norm"))
        p.from_checkpoint(blk + "ffn_norm.weight", need(tensors, pre + "post_attention_layernorm.weight", "layer"))
        p.from_checkpoint(blk + "ffn_gate.weight", need(tensors, pre + "mlp.gate_proj.weight", "layer"))
        p.from_checkpoint(blk + "ffn_up.weight", need(tensors, pre + "mlp.up_proj.weight", "layer"))
        p.from_checkpoint(blk + "ffn_down.weight", need(tensors, pre + "mlp.down_proj.weight", "layer"))
    p.from_checkpoint("output_norm.weight", need(tensors, "model.norm.weight", "final norm"))
    if "lm_head.weight" in tensors and not cfg.get("tie_word_embeddings", False):
        p.from_checkpoint("output.weight", tensors["lm_head.weight"])
    elif not cfg.get("tie_word_embeddings", False):
        fail("tensor lm_head.weight missing (config.json says tie_word_embeddings is false)")
    if arch == "llama":
        div = llama3_rope_divisors(cfg, head_dim)
        if div is not None:
            p.from_floats("rope_freqs.weight", div)
    pre_tok = "qwen2" if arch == "qwen3" else "llama-bpe"
    return p, pre_tok


def plan_gemma4(cfg, tensors):
    """Gemma-4 text model: cfg is the text config (the root, or text_config of the multimodal layout)."""
    p = Plan("gemma4")
    H, L, n_head = cfg["hidden_size"], cfg["num_hidden_layers"], cfg.get("num_attention_heads", 8)
    hd_swa = cfg.get("head_dim", 256)
    hd_full = cfg.get("global_head_dim") or hd_swa
    k_eq_v = bool(cfg.get("attention_k_eq_v", False))
    n_kv_swa = cfg.get("num_key_value_heads", 4)
    # as transformers (and blockspec) read it: the global K/V head count applies only under attention_k_eq_v
    n_kv_full = cfg.get("num_global_key_value_heads") if k_eq_v and cfg.get("num_global_key_value_heads") else n_kv_swa
    types = cfg.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(L)]
    swa = [t == "sliding_attention" for t in types]
    swa[-1] = False   # transformers forces the last layer to full attention
    shared = cfg.get("num_kv_shared_layers", 0) or 0
    first_shared = L - shared
    ple = cfg.get("hidden_size_per_layer_input") or 0
    inter = cfg["intermediate_size"]
    double_wide = bool(cfg.get("use_double_wide_mlp", False)) and shared > 0
    rp = cfg.get("rope_parameters") or {}
    rp_swa, rp_full = rp.get("sliding_attention", {}), rp.get("full_attention", {})
    if shared and not (first_shared >= 2 and not swa[first_shared - 1] and swa[first_shared - 2]):
        # llama.cpp's KV-shared layers reuse layer first_shared-1 (full) or first_shared-2 (sliding), which is
        # transformers' rule only when those two layers are of those types (true of the published E2B / E4B)
        fail("num_kv_shared_layers %d: llama.cpp needs layer %d full and layer %d sliding to share K/V as transformers "
             "does" % (shared, first_shared - 1, first_shared - 2))
    if cfg.get("enable_moe_block"):
        fail("Gemma-4 mixture-of-experts checkpoints are not converted here (blockspec does not run them)")

    p.kv("{arch}.context_length", KV_U32, cfg.get("max_position_embeddings", 131072))
    p.kv("{arch}.embedding_length", KV_U32, H)
    p.kv("{arch}.block_count", KV_U32, L)
    if double_wide:
        p.kv("{arch}.feed_forward_length", KV_ARRAY, (KV_U32, [inter if i < first_shared else 2 * inter for i in range(L)]))
    else:
        p.kv("{arch}.feed_forward_length", KV_U32, inter)
    p.kv("{arch}.attention.head_count", KV_U32, n_head)
    p.kv("{arch}.attention.head_count_kv", KV_ARRAY, (KV_U32, [n_kv_swa if s else n_kv_full for s in swa]))
    p.kv("{arch}.attention.key_length", KV_U32, hd_full)
    p.kv("{arch}.attention.value_length", KV_U32, hd_full)
    p.kv("{arch}.attention.key_length_swa", KV_U32, hd_swa)
    p.kv("{arch}.attention.value_length_swa", KV_U32, hd_swa)
    p.kv("{arch}.attention.sliding_window", KV_U32, cfg.get("sliding_window", 512))
    p.kv("{arch}.attention.sliding_window_pattern", KV_ARRAY, (KV_BOOL, swa))
    p.kv("{arch}.attention.shared_kv_layers", KV_U32, shared)
    p.kv("{arch}.attention.layer_norm_rms_epsilon", KV_F32, float(cfg.get("rms_norm_eps", 1e-6)))
    p.kv("{arch}.embedding_length_per_layer_input", KV_U32, ple)
    # full layers rotate over the whole head (the still pairs get divisor 1e30 below); sliding ones over theirs
    p.kv("{arch}.rope.dimension_count", KV_U32, hd_full)
    p.kv("{arch}.rope.dimension_count_swa", KV_U32, hd_swa)
    p.kv("{arch}.rope.freq_base", KV_F32, float(rp_full.get("rope_theta", 1e6)))
    p.kv("{arch}.rope.freq_base_swa", KV_F32, float(rp_swa.get("rope_theta", 1e4)))
    if cfg.get("final_logit_softcapping"):
        p.kv("{arch}.final_logit_softcapping", KV_F32, float(cfg["final_logit_softcapping"]))

    pre = "model.language_model." if "model.language_model.embed_tokens.weight" in tensors else "model."
    p.from_checkpoint("token_embd.weight", need(tensors, pre + "embed_tokens.weight", "embedding"))
    if ple:
        p.from_checkpoint("per_layer_token_embd.weight", need(tensors, pre + "embed_tokens_per_layer.weight", "per-layer embeddings"))
        p.from_checkpoint("per_layer_model_proj.weight", need(tensors, pre + "per_layer_model_projection.weight", "per-layer embeddings"))
        p.from_checkpoint("per_layer_proj_norm.weight", need(tensors, pre + "per_layer_projection_norm.weight", "per-layer embeddings"))
    for i in range(L):
        lp, blk = pre + "layers.%d." % i, "blk.%d." % i
        own_kv = i < first_shared
        p.from_checkpoint(blk + "attn_norm.weight", need(tensors, lp + "input_layernorm.weight", "layer"))
        p.from_checkpoint(blk + "attn_q.weight", need(tensors, lp + "self_attn.q_proj.weight", "layer"))
        p.from_checkpoint(blk + "attn_q_norm.weight", need(tensors, lp + "self_attn.q_norm.weight", "layer"))
        # KV-shared layers' K/V tensors are optional to llama.cpp (and ignored by transformers): kept when present
        for hf, gg in (("self_attn.k_proj.weight", "attn_k.weight"), ("self_attn.k_norm.weight", "attn_k_norm.weight")):
            if lp + hf in tensors:
                p.from_checkpoint(blk + gg, tensors[lp + hf])
            elif own_kv:
                fail("tensor %s missing (layer %d computes its own K/V)" % (lp + hf, i))
        if lp + "self_attn.v_proj.weight" in tensors:
            p.from_checkpoint(blk + "attn_v.weight", tensors[lp + "self_attn.v_proj.weight"])
        elif own_kv and not (k_eq_v and not swa[i]):
            fail("tensor %s missing (only attention_k_eq_v full layers have none)" % (lp + "self_attn.v_proj.weight"))
        p.from_checkpoint(blk + "attn_output.weight", need(tensors, lp + "self_attn.o_proj.weight", "layer"))
        p.from_checkpoint(blk + "post_attention_norm.weight", need(tensors, lp + "post_attention_layernorm.weight", "layer"))
        p.from_checkpoint(blk + "ffn_norm.weight", need(tensors, lp + "pre_feedforward_layernorm.weight", "layer"))
        p.from_checkpoint(blk + "ffn_gate.weight", need(tensors, lp + "mlp.gate_proj.weight", "layer"))
        p.from_checkpoint(blk + "ffn_up.weight", need(tensors, lp + "mlp.up_proj.weight", "layer"))
        p.from_checkpoint(blk + "ffn_down.weight", need(tensors, lp + "mlp.down_proj.weight", "layer"))
        p.from_checkpoint(blk + "post_ffw_norm.weight", need(tensors, lp + "post_feedforward_layernorm.weight", "layer"))
        if ple:
            p.from_checkpoint(blk + "inp_gate.weight", need(tensors, lp + "per_layer_input_gate.weight", "per-layer embeddings"))
            p.from_checkpoint(blk + "proj.weight", need(tensors, lp + "per_layer_projection.weight", "per-layer embeddings"))
            p.from_checkpoint(blk + "post_norm.weight", need(tensors, lp + "post_per_layer_input_norm.weight", "per-layer embeddings"))
        if lp + "layer_scalar" in tensors:
            p.from_checkpoint(blk + "layer_output_scale.weight", tensors[lp + "layer_scalar"])
    p.from_checkpoint("output_norm.weight", need(tensors, pre + "norm.weight", "final norm"))
    if "lm_head.weight" in tensors and not cfg.get("_tied", True):
        p.from_checkpoint("output.weight", tensors["lm_head.weight"])
    if not all(swa):
        # proportional RoPE: the first partial_rotary_factor of the pairs turn at theta^(-2i/hd_full), the rest
        # stay still (divisor 1e30, as llama.cpp's converter writes); "default" RoPE on a full layer: all turn
        if rp_full.get("rope_type", "default") == "proportional":
            turning = int(hd_full * rp_full.get("partial_rotary_factor", 1.0) / 2)
            if rp_full.get("factor", 1.0) != 1.0:
                fail("rope_parameters.full_attention.factor != 1 is not written here")
        else:
            turning = hd_full // 2
        p.from_floats("rope_freqs.weight", [1.0] * turning + [1e30] * (hd_full // 2 - turning))
    return p, "default"


def main():
    if len(sys.argv) != 3:
        fail("usage: gguf_from_safetensors.py CHECKPOINT_DIR OUT.gguf")
    src, dst = sys.argv[1], sys.argv[2]
    root = json.load(open(os.path.join(src, "config.json")))
    mt = root.get("model_type")
    tensors = read_safetensors(src)
    if mt in ("qwen3", "llama"):
        cfg = root
        plan, pre_tok = plan_qwen3_llama(cfg, tensors, mt)
    elif mt in ("gemma4_text", "gemma4", "gemma4_unified", "gemma4_unified_text"):
        cfg = dict(root.get("text_config", root))
        # the multimodal layout's top level decides what is tied (default true, as Gemma4TextConfig's)
        cfg["_tied"] = root.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True))
        plan, pre_tok = plan_gemma4(cfg, tensors)
    else:
        fail("%s/config.json: model_type is %r; this writes qwen3, llama and gemma4 text checkpoints" % (src, mt))
    vocab = cfg["vocab_size"]
    for t in plan.tensors:
        if t[0] == "token_embd.weight" and t[1][1] != vocab:
            fail("embedding has %d rows, vocab_size is %d" % (t[1][1], vocab))

    tokens = bytes_to_unicode() + ["<|filler_%d|>" % i for i in range(vocab - 256)]
    all_bf16 = all(t[2] == GGUF_TYPE["BF16"] for t in plan.tensors if len(t[1]) > 1)
    head = [("general.architecture", KV_STRING, plan.arch),
            ("general.name", KV_STRING, os.path.basename(os.path.normpath(src))),
            ("general.alignment", KV_U32, ALIGN)]
    if all_bf16:
        head.append(("general.file_type", KV_U32, FTYPE_MOSTLY_BF16))
    tok = [("tokenizer.ggml.model", KV_STRING, "gpt2"),
           ("tokenizer.ggml.pre", KV_STRING, pre_tok),
           ("tokenizer.ggml.tokens", KV_ARRAY, (KV_STRING, tokens)),
           ("tokenizer.ggml.token_type", KV_ARRAY, (KV_I32, [1] * vocab)),
           ("tokenizer.ggml.merges", KV_ARRAY, (KV_STRING, [])),
           ("tokenizer.ggml.bos_token_id", KV_U32, special_id(cfg, "bos_token_id", vocab)),
           ("tokenizer.ggml.eos_token_id", KV_U32, special_id(cfg, "eos_token_id", vocab))]
    kvs = head + plan.kvs + tok

    infos, offset = b"", 0
    for name, dims, gtype, _, size in plan.tensors:
        infos += pack_str(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        infos += struct.pack("<IQ", gtype, offset)
        offset += (size + ALIGN - 1) // ALIGN * ALIGN

    tmp = dst + ".tmp"
    with open(tmp, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, len(plan.tensors), len(kvs)))
        out.write(b"".join(pack_kv(*kv) for kv in kvs))
        out.write(infos)
        out.write(b"\0" * (-out.tell() % ALIGN))
        start = out.tell()
        for name, dims, gtype, source, size in plan.tensors:
            copy_tensor(out, source)
            if out.tell() - start > offset:
                fail("%s: wrote past the planned data" % name)
            out.write(b"\0" * (-out.tell() % ALIGN))
    os.replace(tmp, dst)   # a half-written file never carries the final name (the device script reuses it)
    print("wrote %s: %s, %d tensors, %.2f GB" % (dst, plan.arch, len(plan.tensors), offset / 1e9))


if __name__ == "__main__":
    main()
