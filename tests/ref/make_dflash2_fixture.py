# Reference vectors for DFlash 2 drafters (docs/dflash2.md), from a standalone PyTorch reference written here
# from the two public implementations: z-lab/dflash dflash/model_mlx.py at commit 0a7587c0 (DFlash2DecoderLayer,
# GroupedDynamicCausalConv, CandidateSelector, DFlashAttention's window mask) and vLLM's
# vllm/model_executor/models/qwen3_dflash2.py (DFlashGroupedConv, _score_edges, compute_candidates). Torch only
# (no transformers, no safetensors package, no network); runs on the CPU in a few seconds under torch 1.13 or
# later:
#
#   python3 tests/ref/make_dflash2_fixture.py OUT_DIR
#
# Writes OUT_DIR/target/ (a random Qwen3ForCausalLM: config.json + model.safetensors, bf16), OUT_DIR/dflash2/ and
# OUT_DIR/dflash2_causal/ (the same random DFlash2DraftModel weights, bf16; two configs, see below), and
# OUT_DIR/<drafter>.expect.safetensors (fp32 / int32) with:
#   prompt_ids [P]            the prompt (random)
#   target_layer_ids [m]      taps: the target's hidden_states[id + 1] (outputs of decoder layers 0 and 2)
#   context_features [P][m*H] the taps of the prompt rows, concatenated in target_layer_ids order
#   block_input_ids [B]       [anchor, mask x (B-1)], anchor = the target's greedy token after the prompt
#   block_hidden [B][H]       the drafter's rows after its final norm, all B rows
#   unary_logits [n][V]       rows 1..B-1 through the target's LM head, x output_multiplier, softcapped (n = B-1)
#   selector_hidden [n][R]    z = candidate_selector.hidden_projection of those rows
#   candidate_ids [n][K]      each slot's K best unary logits, by value descending then id ascending
#   candidate_unary [n][K]    their unary logits
#   draft_tokens [n]          the greedy walk from the anchor
#   walk_scores [n][K]        its scores unary + <A[prev] * z, B[cand]> (prev = the anchor, then the walk's picks)
#   walk_uniforms [n]         u_p = (p + 0.5) / n: the uniforms of the sampled walk below (fixed so that
#                             `blockspec dump` can use the same ones)
#   sampled_tokens [n]        the walk at temperature 1: slot p draws from q_p by its inverse CDF (candidate order)
#   sampled_q [n][K]          q_p = softmax(scores_p / 1) over the candidates, given the sampled predecessors
# Every expected value is computed in fp32 on the CPU from the saved bf16 weights (as ../shared/fixtures: an fp32
# engine agrees to ~1e-5; the C test allows 1e-3 absolute, ids exact).
#
# The two drafters: `dflash2` says is_causal false (the official checkpoints), layer 0 "sliding_attention" with a
# window of 8 (shorter than the 12-row prompt, so each block row sees its own window: distance < 8), layer 1
# full attention, output_multiplier 0.5, final_logit_softcapping 4, input_embedding_scale 1.25 (so every
# optional transform is exercised). `dflash2_causal` omits is_causal: the MLX reference then makes the sliding
# layer's block attention causal (its rule is_causal = is_sliding when the config does not say).
#
# Where the two references differ, and what this file (and blockspec) follows:
#  1. Candidate order. MLX: argpartition (unordered); vLLM: a sorted top-k. Here: value descending, then id
#     ascending, so ids and ties are reproducible.
#  2. Walk ties. MLX: the first maximum in partition order; vLLM: the lowest slot of its sorted top-k. Here: the
#     first maximum in the order of 1 (vLLM's rule on a fully specified order).
#  3. The unary transform. MLX applies output_multiplier and the softcap to the whole row before its top-K;
#     vLLM takes the top-K of the raw head output and transforms the K values. Both transforms are increasing,
#     so the candidates agree unless rounding makes two values equal; here the whole row is transformed first
#     (MLX), and blockspec's candidates come from the raw row (vLLM); the test row values are far from ties.
#  4. Edges. MLX scores one predecessor row per slot; vLLM scores the full K x K edge matrix between slots and
#     walks it. Along the walk both give <A[prev] * z, B[cand]>; here one row, in fp32.
#  5. Sampling. MLX: a categorical draw from softmax(scores / T) (its _sampling_probs without top-p/top-k); vLLM:
#     Gumbel-max with a seeded stream. Same distribution, different streams; here the inverse CDF at a given
#     uniform, so that the draws are reproducible.
#  6. The context window. MLX keeps the last W-1 context rows and masks query - key >= W, so block row i sees
#     the last W-1-i context rows (and every block row); vLLM hands the window to its attention backend. Here
#     MLX's mask over all context rows (the rows MLX drops are exactly those at distance >= W).
#  7. Causality. MLX: is_causal from config.json, else causal on sliding layers; vLLM: dflash_config.causal.
#     Here MLX's rule.
#  8. The block boundary of the convolution. MLX runs one block (a zero row before it); vLLM zeroes the taps of
#     rows whose position in the block is below the tap. The same for one block.
#  9. input_embedding_scale. MLX multiplies the target's embed_scale by it; vLLM multiplies the embedding by it.
#     The same for Qwen targets (embed_scale 1).
# 10. Codebook names. The checkpoint stores candidate_selector.{predecessor,successor}_codebook without
#     ".weight"; MLX renames them to load an nn.Embedding. Written here as stored.
# 11. MLX's bind() gives a draft config left at multiplier 1 / no softcap the target's own output multiplier;
#     Qwen targets have none, and this file's drafter states its own.
# 12. Precision. Both run in the checkpoint's dtype (bf16 activations); here fp32 activations from bf16 weights.
import json, os, struct, sys
import torch

torch.manual_seed(2027)
out = sys.argv[1] if len(sys.argv) > 1 else "dflash2_fixture"
os.makedirs(out, exist_ok=True)

V, H, LT, NH, NKV, HD, INTER, THETA, EPS = 256, 64, 4, 4, 2, 16, 128, 10000.0, 1e-6   # target
LD, B, TAPS_IDS, TAPS, GROUP, R, K, W = 2, 6, [0, 2], 2, 16, 8, 8, 8                  # drafter
MULT, CAP, ESCALE = 0.5, 4.0, 1.25
P = 12
MASK = V - 1


def save_safetensors(path, tensors):
    """tensors: name -> (dtype name, torch tensor already in that dtype)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dt, t) in tensors.items():
        t = t.contiguous()
        raw = (t.view(torch.int16) if dt == "BF16" else t).numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def bf16(t):
    return t.to(torch.bfloat16)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos):
    """x [rows, heads, hd] rotated half against half, at positions pos [rows] (fp32 inverse frequencies)."""
    inv = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def attend(q, k, v, visible):
    """q [nq, NH, HD], k/v [nk, NKV, HD], visible [nq, nk] bool: grouped-query softmax attention."""
    rep = NH // NKV
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * HD ** -0.5
    s = s.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v)


# ---- a random Qwen3 target, its bf16 checkpoint, its fp32 forward (hidden states of every layer) ----

def rand_lin(o, i, scale=1.0):
    return torch.randn(o, i) * scale / i ** 0.5


def rand_norm(n):
    return 1.0 + 0.1 * torch.randn(n)


tw = {"model.embed_tokens.weight": torch.randn(V, H), "model.norm.weight": rand_norm(H), "lm_head.weight": rand_lin(V, H)}
for l in range(LT):
    p = f"model.layers.{l}."
    tw.update({p + "input_layernorm.weight": rand_norm(H), p + "post_attention_layernorm.weight": rand_norm(H),
               p + "self_attn.q_proj.weight": rand_lin(NH * HD, H), p + "self_attn.k_proj.weight": rand_lin(NKV * HD, H),
               p + "self_attn.v_proj.weight": rand_lin(NKV * HD, H), p + "self_attn.o_proj.weight": rand_lin(H, NH * HD),
               p + "self_attn.q_norm.weight": rand_norm(HD), p + "self_attn.k_norm.weight": rand_norm(HD),
               p + "mlp.gate_proj.weight": rand_lin(INTER, H), p + "mlp.up_proj.weight": rand_lin(INTER, H),
               p + "mlp.down_proj.weight": rand_lin(H, INTER)})
tw = {k: bf16(v) for k, v in tw.items()}
os.makedirs(os.path.join(out, "target"), exist_ok=True)
save_safetensors(os.path.join(out, "target", "model.safetensors"), {k: ("BF16", v) for k, v in tw.items()})
with open(os.path.join(out, "target", "config.json"), "w") as f:
    json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V, "hidden_size": H,
               "num_hidden_layers": LT, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
               "intermediate_size": INTER, "hidden_act": "silu", "rms_norm_eps": EPS, "max_position_embeddings": 512,
               "rope_parameters": {"rope_theta": THETA, "rope_type": "default"}, "tie_word_embeddings": False,
               "attention_bias": False, "torch_dtype": "bfloat16"}, f, indent=2)
T = {k: v.float() for k, v in tw.items()}


def target_forward(ids):
    """Causal forward of the prompt: (hidden_states as transformers lists them, logits of every row)."""
    n = len(ids)
    pos = torch.arange(n)
    x = T["model.embed_tokens.weight"][ids]
    hs = [x]
    causal = pos[None, :] <= pos[:, None]
    for l in range(LT):
        p = f"model.layers.{l}."
        a = rms(x, T[p + "input_layernorm.weight"])
        q = rms((a @ T[p + "self_attn.q_proj.weight"].T).view(n, NH, HD), T[p + "self_attn.q_norm.weight"])
        k = rms((a @ T[p + "self_attn.k_proj.weight"].T).view(n, NKV, HD), T[p + "self_attn.k_norm.weight"])
        v = (a @ T[p + "self_attn.v_proj.weight"].T).view(n, NKV, HD)
        o = attend(rope(q, pos), rope(k, pos), v, causal).reshape(n, NH * HD)
        x = x + o @ T[p + "self_attn.o_proj.weight"].T
        m = rms(x, T[p + "post_attention_layernorm.weight"])
        g, u = m @ T[p + "mlp.gate_proj.weight"].T, m @ T[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ T[p + "mlp.down_proj.weight"].T
        hs.append(x)
    x = rms(x, T["model.norm.weight"])
    hs[-1] = x
    return hs, x @ T["lm_head.weight"].T


# ---- a random DFlash 2 drafter (the same weights under two configs) ----

dw = {"fc.weight": rand_lin(H, len(TAPS_IDS) * H), "hidden_norm.weight": rand_norm(H), "norm.weight": rand_norm(H),
      "candidate_selector.hidden_projection.weight": rand_lin(R, H),
      "candidate_selector.predecessor_codebook": torch.randn(V, R),
      "candidate_selector.successor_codebook": torch.randn(V, R) / R ** 0.5}
G = H // GROUP
for l in range(LD):
    p = f"layers.{l}."
    dw.update({p + "input_layernorm.weight": rand_norm(H), p + "post_attention_layernorm.weight": rand_norm(H),
               p + "self_attn.q_proj.weight": rand_lin(NH * HD, H), p + "self_attn.k_proj.weight": rand_lin(NKV * HD, H),
               p + "self_attn.v_proj.weight": rand_lin(NKV * HD, H), p + "self_attn.o_proj.weight": rand_lin(H, NH * HD),
               p + "self_attn.q_norm.weight": rand_norm(HD), p + "self_attn.k_norm.weight": rand_norm(HD),
               p + "mlp.gate_proj.weight": rand_lin(INTER, H), p + "mlp.up_proj.weight": rand_lin(INTER, H),
               p + "mlp.down_proj.weight": rand_lin(H, INTER)})
    for site in ("attention_conv", "mlp_conv"):
        base = 0.3 * torch.randn(2, TAPS, H)
        base[:, 0] += 1.0            # tap 0 near the identity, tap 1 a real mix of the row before
        dw[p + site + ".base_kernel"] = base
        dw[p + site + ".kernel_projection.weight"] = rand_lin(2 * TAPS * G, H, 0.3)
dw = {k: bf16(v) for k, v in dw.items()}
D = {k: v.float() for k, v in dw.items()}


def drafter_config(causal_key):
    c = {"architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "dtype": "bfloat16", "vocab_size": V,
         "hidden_size": H, "num_hidden_layers": LD, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
         "intermediate_size": INTER, "rms_norm_eps": EPS, "max_position_embeddings": 512, "num_target_layers": LT,
         "rope_parameters": {"rope_theta": THETA, "rope_type": "default"}, "attention_bias": False,
         "tie_word_embeddings": False, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": W,
         "use_sliding_window": True, "max_window_layers": LD,
         "dflash_config": {"block_size": B, "mask_token_id": MASK, "target_layer_ids": TAPS_IDS, "conv_kernel_size": TAPS,
                           "conv_group_size": GROUP, "selector_rank": R, "selector_top_k": K, "output_multiplier": MULT,
                           "final_logit_softcapping": CAP, "input_embedding_scale": ESCALE}}
    if causal_key is not None:
        c["is_causal"] = causal_key
    return c


def conv(y, dyn, base):
    """The grouped dynamic convolution over one block: y [B, H], dyn [B, TAPS, G] (this stage), base [TAPS, H]."""
    coef = base[None] + dyn.repeat_interleave(GROUP, dim=-1)      # [B, TAPS, H]: channel c reads group c // GROUP
    out = torch.zeros_like(y)
    for tau in range(TAPS):
        shifted = torch.cat([torch.zeros(tau, H), y[: B - tau]]) if tau else y   # row t reads row t - tau, zero before the block
        out = out + coef[:, tau] * shifted
    return out


def drafter_forward(feat, anchor, causal_sliding):
    """feat [P, m*H]: the context's taps. Returns the block's final-normed rows [B, H]."""
    ctx = rms(feat @ D["fc.weight"].T, D["hidden_norm.weight"])
    ids = torch.tensor([anchor] + [MASK] * (B - 1))
    x = T["model.embed_tokens.weight"][ids] * ESCALE
    qpos, cpos = P + torch.arange(B), torch.arange(P)
    for l in range(LD):
        p = f"layers.{l}."
        sliding = l == 0
        causal = causal_sliding and sliding
        # who sees whom: context keys within the window (sliding layers), block keys all or up to the row
        vis_ctx = (qpos[:, None] - cpos[None, :] < W) if sliding else torch.ones(B, P, dtype=torch.bool)
        vis_blk = (torch.arange(B)[None, :] <= torch.arange(B)[:, None]) if causal else torch.ones(B, B, dtype=torch.bool)
        visible = torch.cat([vis_ctx, vis_blk], dim=1)

        n = rms(x, D[p + "input_layernorm.weight"])
        dyn = (n @ D[p + "attention_conv.kernel_projection.weight"].T).view(B, 2, TAPS, G)
        a = conv(n, dyn[:, 0], D[p + "attention_conv.base_kernel"][0])
        q = rms((a @ D[p + "self_attn.q_proj.weight"].T).view(B, NH, HD), D[p + "self_attn.q_norm.weight"])
        kb = rms((a @ D[p + "self_attn.k_proj.weight"].T).view(B, NKV, HD), D[p + "self_attn.k_norm.weight"])
        vb = (a @ D[p + "self_attn.v_proj.weight"].T).view(B, NKV, HD)
        kc = rms((ctx @ D[p + "self_attn.k_proj.weight"].T).view(P, NKV, HD), D[p + "self_attn.k_norm.weight"])
        vc = (ctx @ D[p + "self_attn.v_proj.weight"].T).view(P, NKV, HD)
        k = torch.cat([rope(kc, cpos), rope(kb, qpos)])
        v = torch.cat([vc, vb])
        o = attend(rope(q, qpos), k, v, visible).reshape(B, NH * HD) @ D[p + "self_attn.o_proj.weight"].T
        x = x + conv(o, dyn[:, 1], D[p + "attention_conv.base_kernel"][1])

        m = rms(x, D[p + "post_attention_layernorm.weight"])
        dyn = (m @ D[p + "mlp_conv.kernel_projection.weight"].T).view(B, 2, TAPS, G)
        u = conv(m, dyn[:, 0], D[p + "mlp_conv.base_kernel"][0])
        f = (torch.nn.functional.silu(u @ D[p + "mlp.gate_proj.weight"].T) * (u @ D[p + "mlp.up_proj.weight"].T)) @ D[p + "mlp.down_proj.weight"].T
        x = x + conv(f, dyn[:, 1], D[p + "mlp_conv.base_kernel"][1])
    return rms(x, D["norm.weight"])


def walk(cand, unary, z, anchor, temperature, uniforms):
    """The selector walk: (picks [n], scores [n][K], q [n][K]) as in the header (fp32 scores, float64 softmax/draw)."""
    n = cand.shape[0]
    A, Bc = D["candidate_selector.predecessor_codebook"], D["candidate_selector.successor_codebook"]
    prev, picks, scores, qs = anchor, [], [], []
    for p in range(n):
        s = unary[p] + (Bc[cand[p]] * (A[prev] * z[p])[None, :]).sum(-1)
        if temperature > 0:
            q = torch.softmax(s.double() / temperature, dim=-1).float()
            target, acc, k = uniforms[p] * q.double().sum().item(), 0.0, K - 1
            for j in range(K):
                acc += q[j].item()
                if target < acc:
                    k = j
                    break
        else:
            k = 0
            for j in range(1, K):
                if s[j] > s[k]:
                    k = j
            q = torch.zeros(K)
            q[k] = 1.0
        prev = int(cand[p, k])
        picks.append(prev)
        scores.append(s)
        qs.append(q)
    return torch.tensor(picks, dtype=torch.int32), torch.stack(scores), torch.stack(qs)


with torch.no_grad():
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, V - 1, (P,), generator=g)
    hs, logits = target_forward(prompt)
    anchor = int(torch.argmax(logits[-1]))
    feat = torch.cat([hs[i + 1] for i in TAPS_IDS], dim=-1)
    for name, causal_key, causal_sliding in (("dflash2", False, False), ("dflash2_causal", None, True)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        save_safetensors(os.path.join(d, "model.safetensors"), {k: ("BF16", v) for k, v in dw.items()})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(drafter_config(causal_key), f, indent=2)
        h = drafter_forward(feat, anchor, causal_sliding)
        rows = h[1:]
        raw = rows @ T["lm_head.weight"].T
        unary = torch.tanh(raw * MULT / CAP) * CAP
        z = rows @ D["candidate_selector.hidden_projection.weight"].T
        cand = torch.empty(B - 1, K, dtype=torch.int64)
        for p in range(B - 1):   # value descending, then id ascending (a stable sort of the ids by -value)
            order = sorted(range(V), key=lambda i: (-float(unary[p, i]), i))
            cand[p] = torch.tensor(order[:K])
        cu = torch.gather(unary, 1, cand)
        greedy, scores, _ = walk(cand, cu, z, anchor, 0.0, None)
        uniforms = [(p + 0.5) / (B - 1) for p in range(B - 1)]
        sampled, _, sq = walk(cand, cu, z, anchor, 1.0, uniforms)
        expect = {
            "prompt_ids": ("I32", prompt.to(torch.int32)),
            "target_layer_ids": ("I32", torch.tensor(TAPS_IDS, dtype=torch.int32)),
            "context_features": ("F32", feat.float()),
            "block_input_ids": ("I32", torch.tensor([anchor] + [MASK] * (B - 1), dtype=torch.int32)),
            "block_hidden": ("F32", h.float()),
            "unary_logits": ("F32", unary.float()),
            "selector_hidden": ("F32", z.float()),
            "candidate_ids": ("I32", cand.to(torch.int32)),
            "candidate_unary": ("F32", cu.float()),
            "draft_tokens": ("I32", greedy),
            "walk_scores": ("F32", scores.float()),
            "walk_uniforms": ("F32", torch.tensor(uniforms, dtype=torch.float32)),
            "sampled_tokens": ("I32", sampled),
            "sampled_q": ("F32", sq.float()),
        }
        save_safetensors(os.path.join(out, name + ".expect.safetensors"), expect)
        print(name, "anchor", anchor, "greedy", greedy.tolist(), "sampled", sampled.tolist())
