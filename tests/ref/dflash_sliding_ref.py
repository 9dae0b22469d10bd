#!/usr/bin/python3
"""Reference vectors for a z-lab DFlash drafter with a sliding-window layer (issue 32).

OUR reference, not z-lab's code: a plain numpy transcription of the forward of z-lab/dflash
dflash/model.py (DFlashDraftModel.forward, Qwen3DFlashDecoderLayer, Qwen3DFlashAttention, commit
44947fb), fp64 arithmetic on the bf16 weights of ../shared/fixtures/dflash, RoPE inverse
frequencies in fp32 as transformers computes them. Why not z-lab's code itself: it imports
transformers, which Debian 12 does not package (python3-torch 1.13 is packaged, transformers is not).

Before writing anything, the same function with full attention must reproduce z-lab's own vectors
(dflash.expect.safetensors, made with model.py + transformers 5.17), so only the window differs from
code z-lab ran.

The window. model.py passes `sliding_window` to the attention function but builds no attention mask:
transformers' eager and sdpa attention apply a window only through the mask, so on the CPU a
"sliding_attention" layer of model.py attends to everything; flash-attention-2 applies a band of
(W-1, W-1) around each row. blockspec follows the MLX port (z-lab's model_mlx.py: a rotating cache of
the context keys, the block's keys appended after it): every block row sees the LAST W CONTEXT ROWS
and the whole block (src/model/dflash.c, bs_drafter_config.layer_window). These vectors pin that
semantics down independently of the engine's kernels.

Usage: python3 tests/ref/dflash_sliding_ref.py [FIXTURES]   (writes tests/ref/dflash_sliding/)
"""
import json, os, struct, sys
import numpy as np

FX = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../../shared/fixtures")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dflash_sliding")
WINDOW, LAYER_TYPES, CONTEXTS, ANCHORS = 5, ["sliding_attention", "full_attention"], [3, 5, 6, 12, 20], [17, 200, 90, 5, 331]


def load_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        raw = data[a:b]
        if v["dtype"] == "BF16":
            t = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            t = np.frombuffer(raw, {"F32": np.float32, "I32": np.int32}[v["dtype"]])
        out[k] = t.reshape(v["shape"]).astype(np.float64 if v["dtype"] != "I32" else np.int32)
    return out


def save_st(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a, {"F32": "<f4", "I32": "<i4"}[dt]).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def rmsnorm(x, w, eps):   # Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps) * weight
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, theta):  # rotate-half RoPE; x [n, heads, d]; inv_freq in fp32 as transformers makes it
    d = x.shape[-1]
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / np.float32(d)))).astype(np.float32)
    f = np.outer(pos.astype(np.float32), inv).astype(np.float32)
    emb = np.concatenate([f, f], -1)
    cos, sin = np.cos(emb).astype(np.float32)[:, None, :], np.sin(emb).astype(np.float32)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def drafter_forward(cfg, W, T, feats, block_ids, windows):
    """model.py's DFlashDraftModel.forward for one block after a context of len(feats) rows, positions
    0..ctx+B-1 (dflash_generate's first round). windows[l]: 0 = full attention, else the last W context rows."""
    eps, theta = cfg["rms_norm_eps"], cfg["rope_parameters"]["rope_theta"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    S, B = feats.shape[0], len(block_ids)
    th = rmsnorm(feats @ W["fc.weight"].T, W["hidden_norm.weight"], eps)         # target_hidden
    h = T["model.embed_tokens.weight"][block_ids]                                # noise_embedding
    pos = np.arange(S + B)
    for l in range(cfg["num_hidden_layers"]):
        p = "layers.%d." % l
        res, x = h, rmsnorm(h, W[p + "input_layernorm.weight"], eps)
        q = rmsnorm((x @ W[p + "self_attn.q_proj.weight"].T).reshape(B, nh, hd), W[p + "self_attn.q_norm.weight"], eps)
        kv_in = np.concatenate([th, x])                                          # [context ; block]
        k = rmsnorm((kv_in @ W[p + "self_attn.k_proj.weight"].T).reshape(S + B, nkv, hd), W[p + "self_attn.k_norm.weight"], eps)
        v = (kv_in @ W[p + "self_attn.v_proj.weight"].T).reshape(S + B, nkv, hd)
        q, k = rope(q, pos[S:], theta), rope(k, pos, theta)                      # q takes the last B positions
        keep = np.ones(S + B, bool)
        if windows[l]:
            keep[:max(0, S - windows[l])] = False                                # context rows before the window
        o = np.zeros((B, nh, hd))
        for hh in range(nh):
            g = hh // (nh // nkv)                                                # repeat_kv: query head -> kv head
            s = (k[:, g, :] @ q[:, hh, :].T).T * hd ** -0.5                      # [B, S + B], non-causal
            s[:, ~keep] = -np.inf
            e = np.exp(s - s.max(-1, keepdims=True))
            o[:, hh, :] = (e / e.sum(-1, keepdims=True)) @ v[:, g, :]
        h = res + o.reshape(B, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        res, x = h, rmsnorm(h, W[p + "post_attention_layernorm.weight"], eps)
        gate, up = x @ W[p + "mlp.gate_proj.weight"].T, x @ W[p + "mlp.up_proj.weight"].T
        h = res + (gate / (1 + np.exp(-gate)) * up) @ W[p + "mlp.down_proj.weight"].T
    hid = rmsnorm(h, W["norm.weight"], eps)
    return hid, hid[1:] @ T["lm_head.weight"].T                                  # z-lab: rows 1..B-1 are drafts


def main():
    cfg = json.load(open(os.path.join(FX, "dflash/config.json")))
    W = load_st(os.path.join(FX, "dflash/model.safetensors"))
    T = load_st(os.path.join(FX, "target/model.safetensors"))
    X = load_st(os.path.join(FX, "dflash.expect.safetensors"))
    L = cfg["num_hidden_layers"]
    # 1. Full attention against z-lab's own vectors.
    hid, lg = drafter_forward(cfg, W, T, X["context_features"], X["block_input_ids"], [0] * L)
    dh, dl = np.abs(hid - X["block_hidden"]).max(), np.abs(lg - X["draft_logits"]).max()
    print("full attention vs z-lab's dflash.expect: block_hidden %.2e, draft_logits %.2e" % (dh, dl))
    assert dh < 1e-5 and dl < 1e-4, "the numpy forward does not reproduce z-lab's vectors"
    # 2. The sliding variant: layer 0 windowed (W = 5 < most contexts), layer 1 full.
    os.makedirs(OUT, exist_ok=True)
    scfg = dict(cfg, use_sliding_window=True, sliding_window=WINDOW, layer_types=LAYER_TYPES)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(scfg, f, indent=2); f.write("\n")
    rng = np.random.default_rng(32)
    mask, B = cfg["dflash_config"]["mask_token_id"], cfg["block_size"]
    windows = [WINDOW if t == "sliding_attention" else 0 for t in LAYER_TYPES]
    out = {}
    for S, a in zip(CONTEXTS, ANCHORS):
        feats = rng.standard_normal((S, X["context_features"].shape[1])).astype(np.float32)
        ids = np.array([a] + [mask] * (B - 1), np.int32)
        hid, lg = drafter_forward(cfg, W, T, feats.astype(np.float64), ids, windows)
        full, _ = drafter_forward(cfg, W, T, feats.astype(np.float64), ids, [0] * L)
        print("context %2d: window changes block_hidden by %.3g" % (S, np.abs(hid - full).max()))
        out["context_features_%d" % S] = ("F32", feats)
        out["block_input_ids_%d" % S] = ("I32", ids)
        out["block_hidden_%d" % S] = ("F32", hid)
        out["draft_logits_%d" % S] = ("F32", lg)
    out["contexts"] = ("I32", np.array(CONTEXTS, np.int32))
    save_st(os.path.join(OUT, "expect.safetensors"), out)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
