# Reference vectors for DeepSpec's Gemma-4 DSpark drafter (Gemma4DSparkModel; docs/gemma4.md, "DSpark drafters"),
# in the style of ../shared/fixtures/dspark (tensor names of dspark.expect.safetensors).
#
#   /usr/bin/python3 tests/ref/make_gemma4_dspark_fixture.py [DIR]       # default tests/ref/gemma4
#
# Makes DIR/gemma4_dspark/ (a drafter for DIR/gemma4_text) and DIR/gemma4_dspark_spec/ (one for DIR/gemma4_spec,
# vocabulary 8: speculative tests), each config.json + model.safetensors (random, bf16) and NAME.expect.safetensors,
# with a standalone PyTorch forward (torch only) written from DeepSpec's deepspec/modeling/dspark/gemma4/modeling.py
# (Gemma4DSparkModel, Gemma4DSparkDecoderLayer, Gemma4DSparkAttention), config.py (build_draft_config),
# markov_head.py (the vanilla head) and common.py (AcceptRatePredictor):
#   context rows  c = hidden_norm(fc(concat of the target's hidden_states[id + 1] over target_layer_ids))
#   block rows    x = embed_tokens([anchor, mask x (B-1)]) * sqrt(H)          (Gemma4TextScaledWordEmbedding)
#   per layer     a = input_layernorm(x); q = rope(q_norm(q_proj(a))); K = k_proj([c ; a]) (V = the same with
#                 attention_k_eq_v, else v_proj); k = rope(k_norm(K)); v = v_norm(V) (no weight); attention of
#                 the block over [context ; block] with no mask (is_causal false) and scaling 1; every layer
#                 full attention: global_head_dim, num_global_key_value_heads, the full-attention RoPE
#                 (proportional); x += post_attention_layernorm(o_proj(att)); x += post_feedforward_layernorm(
#                 mlp(pre_feedforward_layernorm(x))) with the GELU-tanh MLP; x *= layer_scalar
#   head          h = norm(x); logits = softcap(lm_head(h)) (compute_logits); step k adds W2 W1[x_{k-1}]
#                 (vanilla Markov head; x_0 = anchor, then the greedy drafts); confidence logit
#                 w . [h_k ; W1[x_{k-1}]] + b
# Positions: context rows 0..n-1, block rows n..n+B-1 (the anchor sits at n). The Gemma RMSNorm multiplies by its
# weight as is (Gemma-4; no 1 + w). Everything fp32 from the bf16 weights read back from the file.
import json, math, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gemma4_fixture import st_save, st_load, Shape, forward, rms, rope, inv_freq, random_weights  # noqa: E402

DRAFTERS = {
    # name: target folder, drafter layers, taps, block, mask id, Markov rank, intermediate size
    "gemma4_dspark": dict(target="gemma4_text", layers=2, taps=[1, 3], block=4, mask=4, rank=8, inter=40),
    "gemma4_dspark_spec": dict(target="gemma4_spec", layers=1, taps=[0, 2], block=4, mask=4, rank=4, inter=48),
}

def draft_config(tcfg, d):
    """DeepSpec's build_draft_config on a Gemma4ForCausalLM text config."""
    c = {k: v for k, v in tcfg.items() if k not in ("architectures", "dtype")}
    c.update(architectures=["Gemma4DSparkModel"], target_model_type="gemma4_text", target_text_model_type="gemma4_text",
             num_target_layers=tcfg["num_hidden_layers"], num_hidden_layers=d["layers"], enable_moe_block=False,
             hidden_size_per_layer_input=0, block_size=d["block"], tie_word_embeddings=False,
             layer_types=["full_attention"] * d["layers"], mask_token_id=d["mask"], target_layer_ids=d["taps"], num_anchors=16,
             enable_confidence_head=True, confidence_head_with_markov=True, markov_rank=d["rank"], markov_head_type="vanilla",
             intermediate_size=d["inter"], dtype="bfloat16")
    return c

def draft_shapes(s, m, r):
    hd, kv = s.ghd, s.gkv
    t = {"fc.weight": (s.H, m * s.H), "hidden_norm.weight": (s.H,), "norm.weight": (s.H,),
         "markov_head.markov_w1.weight": (s.V, r), "markov_head.markov_w2.weight": (s.V, r),
         "confidence_head.proj.weight": (1, s.H + r), "confidence_head.proj.bias": (1,)}
    for l in range(s.L):
        p = f"layers.{l}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            t[p + n + ".weight"] = (s.H,)
        t[p + "self_attn.q_proj.weight"] = (s.nH * hd, s.H); t[p + "self_attn.o_proj.weight"] = (s.H, s.nH * hd)
        t[p + "self_attn.k_proj.weight"] = (kv * hd, s.H)
        if not s.k_eq_v: t[p + "self_attn.v_proj.weight"] = (kv * hd, s.H)
        t[p + "self_attn.q_norm.weight"] = (hd,); t[p + "self_attn.k_norm.weight"] = (hd,)
        t[p + "mlp.gate_proj.weight"] = (s.I, s.H); t[p + "mlp.up_proj.weight"] = (s.I, s.H); t[p + "mlp.down_proj.weight"] = (s.H, s.I)
        t[p + "layer_scalar"] = (1,)
    return t

def draft_forward(w, s, ctx_feat, block_ids):
    """ctx_feat [n, m*H] (the taps, concatenated), block_ids [B]. Returns h [B, H] after the final norm."""
    n, B, hd, nkv = ctx_feat.shape[0], block_ids.shape[0], s.ghd, s.gkv
    g = lambda k: w[k]
    c = rms(ctx_feat @ g("fc.weight").T, g("hidden_norm.weight"), s.eps)
    x = g("embed_tokens.weight")[block_ids] * torch.tensor(float(s.H) ** 0.5)
    pos = torch.arange(n + B)
    f = inv_freq(s, True)
    for l in range(s.L):
        p = f"layers.{l}."
        a = rms(x, g(p + "input_layernorm.weight"), s.eps)
        q = rope(rms((a @ g(p + "self_attn.q_proj.weight").T).view(B, s.nH, hd), g(p + "self_attn.q_norm.weight"), s.eps), pos[n:], f)
        kin = torch.cat([c, a])
        K = (kin @ g(p + "self_attn.k_proj.weight").T).view(n + B, nkv, hd)
        V = K if s.k_eq_v else (kin @ g(p + "self_attn.v_proj.weight").T).view(n + B, nkv, hd)
        k = rope(rms(K, g(p + "self_attn.k_norm.weight"), s.eps), pos, f)
        v = rms(V, None, s.eps)
        rep = s.nH // nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        sc = torch.einsum("qhd,khd->hqk", q, k) * 1.0
        att = torch.einsum("hqk,khd->qhd", torch.softmax(sc, -1), v).reshape(B, s.nH * hd)
        x = x + rms(att @ g(p + "self_attn.o_proj.weight").T, g(p + "post_attention_layernorm.weight"), s.eps)
        mm = rms(x, g(p + "pre_feedforward_layernorm.weight"), s.eps)
        mm = torch.nn.functional.gelu(mm @ g(p + "mlp.gate_proj.weight").T, approximate="tanh") * (mm @ g(p + "mlp.up_proj.weight").T)
        x = x + rms(mm @ g(p + "mlp.down_proj.weight").T, g(p + "post_feedforward_layernorm.weight"), s.eps)
        x = x * g(p + "layer_scalar")
    return rms(x, g("norm.weight"), s.eps)

def make(out, name, d, seed):
    tdir = os.path.join(out, d["target"])
    tcfg = json.load(open(os.path.join(tdir, "config.json")))
    TW = st_load(os.path.join(tdir, "model.safetensors"))
    ts = Shape(tcfg)
    cfg = draft_config(tcfg, d)
    s = Shape(cfg)
    m, r = len(d["taps"]), d["rank"]
    gen = torch.Generator().manual_seed(seed)
    W = random_weights(draft_shapes(s, m, r), gen, 0)
    for k in ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight"):
        W[k] = (torch.randn(s.V, r, generator=gen) * 0.5).to(torch.bfloat16)
    W["confidence_head.proj.bias"] = torch.tensor([0.25]).to(torch.bfloat16)
    # the target's embedding and head (tied: the embedding), bundled as DeepSpec's initialize_embeddings_and_head copies them
    W["embed_tokens.weight"] = TW["model.embed_tokens.weight"].clone()
    W["lm_head.weight"] = TW["model.embed_tokens.weight"].clone()
    ddir = os.path.join(out, name)
    os.makedirs(ddir, exist_ok=True)
    with open(os.path.join(ddir, "config.json"), "w") as fh: json.dump(cfg, fh, indent=2)
    st_save(W, os.path.join(ddir, "model.safetensors"))
    w = {k: v.float() for k, v in st_load(os.path.join(ddir, "model.safetensors")).items()}
    with torch.no_grad():
        texp = st_load(os.path.join(out, d["target"] + ".expect.safetensors"))
        prompt = texp["prompt_ids"].long()
        logits, hs = forward(TW, ts, "model.", prompt)
        feat = torch.cat([hs[i + 1] for i in d["taps"]], -1)
        anchor = int(torch.argmax(logits[-1]))
        ids = torch.tensor([anchor] + [d["mask"]] * (d["block"] - 1))
        h = draft_forward(w, s, feat, ids)
        base = h @ w["lm_head.weight"].T
        if s.cap: base = torch.tanh(base / s.cap) * s.cap
        steps, toks, confs, prev = [], [], [], anchor
        for k in range(d["block"]):
            e = w["markov_head.markov_w1.weight"][prev]
            st = base[k] + w["markov_head.markov_w2.weight"] @ e
            confs.append(torch.dot(w["confidence_head.proj.weight"][0], torch.cat([h[k], e])) + w["confidence_head.proj.bias"][0])
            prev = int(torch.argmax(st))
            steps.append(st); toks.append(prev)
    t = {"target_layer_ids": torch.tensor(d["taps"], dtype=torch.int32), "context_features": feat.contiguous(),
         "block_input_ids": ids.to(torch.int32), "block_hidden": h.contiguous(), "base_logits": base.contiguous(),
         "step_logits": torch.stack(steps).contiguous(), "draft_tokens": torch.tensor(toks, dtype=torch.int32),
         "confidence_logits": torch.stack(confs).float().contiguous()}
    st_save(t, os.path.join(out, name + ".expect.safetensors"))
    print(f"{name}: anchor {anchor}, drafts {toks}, confidences {[round(float(torch.sigmoid(c)), 3) for c in confs]}")

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemma4")
    for i, (name, d) in enumerate(DRAFTERS.items()):
        make(out, name, d, 30 + i)
