#!/usr/bin/env python3
"""Write a GGUF file of a Qwen3 safetensors checkpoint, so llama.cpp (the peer) can be benchmarked on the
very weights blockspec runs.

Only for benchmarks: the vocabulary written is a placeholder (the 256 byte-level tokens, then unique
filler names), because `make-random` checkpoints have no tokenizer and llama-bench feeds random ids.
Matrices keep their stored dtype (BF16 stays BF16); 1-D norm weights are widened to F32, as llama.cpp's
own converter does. Standard library only (CI hosts have no numpy).

usage: gguf_from_safetensors.py CHECKPOINT_DIR OUT.gguf
"""
import json
import os
import struct
import sys

GGUF_TYPE = {"F32": 0, "F16": 1, "BF16": 30}          # ggml_type ids
KV_U32, KV_I32, KV_F32, KV_STRING, KV_ARRAY = 4, 5, 6, 8, 9
ALIGN = 32


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
    return out + struct.pack("<%d%s" % (len(items), "i" if etype == KV_I32 else "I"), *items)


def main():
    if len(sys.argv) != 3:
        fail("usage: gguf_from_safetensors.py CHECKPOINT_DIR OUT.gguf")
    src, dst = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(src, "config.json")))
    arch = cfg.get("model_type")
    if arch != "qwen3":
        fail("%s/config.json: model_type is %r, expected 'qwen3'" % (src, arch))
    rope = cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 1e6))
    n_head = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // n_head)
    vocab = cfg["vocab_size"]

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
                 "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in per_layer.items():
            names["model.layers.%d.%s.weight" % (i, hf)] = "blk.%d.%s.weight" % (i, gg)

    tensors = read_safetensors(src)
    plan = []   # (gguf name, dims innermost first, ggml type, source, widen bf16 -> f32)
    for hf, gg in names.items():
        if hf not in tensors:
            if hf == "lm_head.weight" and cfg.get("tie_word_embeddings", False):
                continue
            fail("%s: tensor %s missing" % (src, hf))
        path, dtype, shape, a, b = tensors[hf]
        if dtype not in GGUF_TYPE:
            fail("%s: tensor %s has dtype %s, expected BF16, F16 or F32" % (src, hf, dtype))
        widen = len(shape) == 1 and dtype == "BF16"
        plan.append((gg, list(reversed(shape)), 0 if widen else GGUF_TYPE[dtype], (path, a, b), widen))

    tokens = bytes_to_unicode() + ["<|filler_%d|>" % i for i in range(vocab - 256)]
    kvs = [
        ("general.architecture", KV_STRING, "qwen3"),
        ("general.name", KV_STRING, os.path.basename(os.path.normpath(src))),
        ("general.alignment", KV_U32, ALIGN),
        ("qwen3.context_length", KV_U32, cfg.get("max_position_embeddings", 40960)),
        ("qwen3.embedding_length", KV_U32, cfg["hidden_size"]),
        ("qwen3.block_count", KV_U32, cfg["num_hidden_layers"]),
        ("qwen3.feed_forward_length", KV_U32, cfg["intermediate_size"]),
        ("qwen3.attention.head_count", KV_U32, n_head),
        ("qwen3.attention.head_count_kv", KV_U32, cfg.get("num_key_value_heads", n_head)),
        ("qwen3.attention.key_length", KV_U32, head_dim),
        ("qwen3.attention.value_length", KV_U32, head_dim),
        ("qwen3.rope.freq_base", KV_F32, float(rope)),
        ("qwen3.attention.layer_norm_rms_epsilon", KV_F32, float(cfg.get("rms_norm_eps", 1e-6))),
        ("tokenizer.ggml.model", KV_STRING, "gpt2"),
        ("tokenizer.ggml.pre", KV_STRING, "qwen2"),
        ("tokenizer.ggml.tokens", KV_ARRAY, (KV_STRING, tokens)),
        ("tokenizer.ggml.token_type", KV_ARRAY, (KV_I32, [1] * vocab)),
        ("tokenizer.ggml.merges", KV_ARRAY, (KV_STRING, [])),
        ("tokenizer.ggml.bos_token_id", KV_U32, special_id(cfg, "bos_token_id", vocab)),
        ("tokenizer.ggml.eos_token_id", KV_U32, special_id(cfg, "eos_token_id", vocab)),
    ]

    infos, offset = b"", 0
    for gg, dims, gtype, (path, a, b), widen in plan:
        infos += pack_str(gg) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        infos += struct.pack("<IQ", gtype, offset)
        size = (b - a) * (2 if widen else 1)
        offset += (size + ALIGN - 1) // ALIGN * ALIGN

    with open(dst, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, len(plan), len(kvs)))
        out.write(b"".join(pack_kv(*kv) for kv in kvs))
        out.write(infos)
        out.write(b"\0" * (-out.tell() % ALIGN))
        for gg, dims, gtype, (path, a, b), widen in plan:
            with open(path, "rb") as f:
                f.seek(a)
                left = b - a
                while left:
                    chunk = f.read(min(left, 64 << 20))
                    if not chunk:
                        fail("%s: ends inside tensor %s" % (path, gg))
                    left -= len(chunk)
                    if widen:   # bf16 -> f32: the 16 bits become the top half of the float
                        chunk = b"".join(b"\0\0" + chunk[j:j + 2] for j in range(0, len(chunk), 2))
                    out.write(chunk)
            out.write(b"\0" * (-out.tell() % ALIGN))
    print("wrote %s: %d tensors" % (dst, len(plan)))


if __name__ == "__main__":
    main()
