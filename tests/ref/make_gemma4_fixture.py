# Reference vectors for Gemma-4 text targets (docs/gemma4.md), in the style of ../shared/fixtures (README there).
#
#   python3 tests/ref/make_gemma4_fixture.py [OUT_DIR]                  # default tests/ref/gemma4
#       makes the random checkpoints (config.json + model.safetensors, bf16) and NAME.expect.safetensors from the
#       standalone PyTorch reference below (torch only: no transformers needed)
#   python3 tests/ref/make_gemma4_fixture.py --check-transformers [DIR]
#       (where transformers with Gemma-4 is importable) loads each checkpoint of DIR with transformers'
#       Gemma4ForCausalLM / Gemma4ForConditionalGeneration (fp32, CPU, eager attention), computes the same vectors
#       and prints their max abs differences from the standalone reference's and from DIR's expect files;
#       exit status 1 when logits / hidden states differ by more than 1e-3 or a greedy id differs
#   python3 tests/ref/make_gemma4_fixture.py --from-transformers [DIR]
#       rewrites DIR/NAME.expect.safetensors from transformers' outputs on DIR's checkpoints (same checks printed)
#
# The standalone reference is written from transformers' modeling_gemma4.py (Gemma4TextModel and the two heads):
# scaled embeddings, Gemma4RMSNorm (x * (mean(x^2) + eps)^-0.5 * w, no 1 + w), sandwich norms, q/k norms with
# weights and a weightless v norm, attention scale 1, sliding layers masked to the window (kv > q - W), full
# layers with their own head size and proportional RoPE, attention_k_eq_v (V = k_proj's output), KV-shared
# layers (the last num_kv_shared_layers reuse the last earlier layer of their type), double-wide MLPs there,
# GELU-tanh MLPs, per-layer embeddings, layer_scalar, the final-logit soft-cap, tied embeddings. Everything in
# fp32 on the CPU from the bf16 weights in the files (the weights are read back from model.safetensors, never
# regenerated), without a KV cache (every forward recomputes the whole sequence: causal, so the same values).
#
# Checkpoints (random weights rescaled so activations and logits are O(1), then rounded to bf16):
#   gemma4_text  Gemma4ForCausalLM (tensors model.*): vocab 128, hidden 32, 6 layers s s f s s f, heads 4, KV 2 x 16 (sliding),
#                full layers 32 wide with attention_k_eq_v and 1 global KV head, sliding_window 5, proportional RoPE
#                (partial 0.25), per-layer embeddings (8 per layer), num_kv_shared_layers 2 with a double-wide
#                MLP, soft-cap 3, layer_scalar != 1, tied embeddings
#   gemma4_mm    Gemma4ForConditionalGeneration (text tower under model.language_model.*, no vision/audio tower):
#                vocab 96, hidden 32, 4 layers s f s f, heads 2, KV 1 x 32 (sliding), full layers 64 wide with their own v_proj,
#                sliding_window 7, partial 0.5, per-layer embeddings (4), no soft-cap, tied
#   gemma4_wide  Gemma4ForCausalLM with Gemma-4's real head sizes (256 sliding, 512 full, k_eq_v, proportional RoPE 0.25)
#                on a tiny model (vocab 32, hidden 16, 2 layers s f, one head): the kernels' wide-head paths
#   gemma4_spec  Gemma4ForCausalLM with a vocabulary of 8 (speculative decoding tests, where random drafts get
#                accepted): 4 layers s f s f, k_eq_v, one KV-shared layer, per-layer embeddings, soft-cap 2
import json, math, os, struct, sys
import torch

# ---------------------------------------------------------------------------------------------------------
# safetensors without the safetensors package (this machine's Debian torch has none)

DT = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "I32": (torch.int32, 4), "I64": (torch.int64, 8),
      "F16": (torch.float16, 2)}

def st_save(tensors, path, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous().cpu()
        dt = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64", torch.float16: "F16"}[t.dtype]
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw); off += len(raw)
    header["__metadata__"] = metadata or {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

def st_load(path):
    with open(path, "rb") as f: data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__": continue
        a, b = info["data_offsets"]
        dt, size = DT[info["dtype"]]
        buf = bytearray(data[base + a:base + b])
        if dt == torch.bfloat16:
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16) if len(buf) else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(buf, dtype=dt) if len(buf) else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out

# ---------------------------------------------------------------------------------------------------------
# configs (field names as transformers' Gemma4TextConfig / Gemma4Config write them)

def text_config(**kw):
    c = dict(model_type="gemma4_text", vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=6,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
             attention_k_eq_v=True, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512, rms_norm_eps=1e-6,
             sliding_window=5, layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
             final_logit_softcapping=3.0, hidden_size_per_layer_input=8, vocab_size_per_layer_input=128,
             num_kv_shared_layers=2, use_double_wide_mlp=True, enable_moe_block=False, attention_bias=False,
             attention_dropout=0.0, use_bidirectional_attention=None, tie_word_embeddings=True,
             pad_token_id=0, bos_token_id=2, eos_token_id=1, use_cache=True, initializer_range=0.02)
    c.update(kw)
    return c

CHECKPOINTS = {
    "gemma4_text": {"architectures": ["Gemma4ForCausalLM"], **text_config(), "dtype": "bfloat16"},
    "gemma4_mm": {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "dtype": "bfloat16",
        "text_config": text_config(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=2,
                                   num_key_value_heads=1, head_dim=32, global_head_dim=64, num_global_key_value_heads=None,
                                   attention_k_eq_v=False, sliding_window=7,
                                   layer_types=["sliding_attention", "full_attention"] * 2,
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                                                       "rope_theta": 1000000.0}},
                                   final_logit_softcapping=None, hidden_size_per_layer_input=4, vocab_size_per_layer_input=96,
                                   num_kv_shared_layers=0, use_double_wide_mlp=False),
        "vision_config": None, "audio_config": None, "tie_word_embeddings": True,
        "boi_token_id": 255999, "eoi_token_id": 258882, "image_token_id": 258880, "video_token_id": 258884,
        "boa_token_id": 256000, "eoa_token_index": 258883, "audio_token_id": 258881, "initializer_range": 0.02},
    "gemma4_spec": {"architectures": ["Gemma4ForCausalLM"], **text_config(vocab_size=8, vocab_size_per_layer_input=8, num_hidden_layers=4,
                    layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=1, final_logit_softcapping=2.0,
                    eos_token_id=[]), "dtype": "bfloat16"},
    "gemma4_wide": {"architectures": ["Gemma4ForCausalLM"], **text_config(vocab_size=32, vocab_size_per_layer_input=32, hidden_size=16,
                    intermediate_size=16, num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1, head_dim=256, global_head_dim=512,
                    num_global_key_value_heads=1, layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
                    use_double_wide_mlp=False, hidden_size_per_layer_input=4, final_logit_softcapping=30.0), "dtype": "bfloat16"},
}

def text_of(cfg):
    return cfg["text_config"] if "text_config" in cfg else cfg

# The standalone model's reading of a text config (transformers' defaults where a field is absent or null).
class Shape:
    def __init__(self, t):
        g = lambda k, d: t.get(k) if t.get(k) is not None else d
        self.V, self.H, self.I, self.L = g("vocab_size", 262144), g("hidden_size", 2304), g("intermediate_size", 9216), g("num_hidden_layers", 30)
        self.nH, self.nKV, self.hd = g("num_attention_heads", 8), g("num_key_value_heads", 4), g("head_dim", 256)
        self.ghd = g("global_head_dim", 512) or self.hd
        self.k_eq_v = g("attention_k_eq_v", False)
        self.gkv = (g("num_global_key_value_heads", None) or self.nKV) if self.k_eq_v else self.nKV
        self.eps, self.W = g("rms_norm_eps", 1e-6), g("sliding_window", 512)
        self.types = list(g("layer_types", None) or ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(self.L)])
        self.types[-1] = "full_attention"
        self.rope = g("rope_parameters", None) or {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}
        self.cap = g("final_logit_softcapping", None)
        self.P, self.VP = g("hidden_size_per_layer_input", 256), g("vocab_size_per_layer_input", 262144)
        self.shared = g("num_kv_shared_layers", 0)
        self.double = g("use_double_wide_mlp", False)
        self.first_shared = self.L - self.shared
    def full(self, l): return self.types[l] == "full_attention"
    def head(self, l): return self.ghd if self.full(l) else self.hd
    def kv_heads(self, l): return self.gkv if self.full(l) else self.nKV
    def has_v(self, l): return not (self.k_eq_v and self.full(l))
    def inter(self, l): return self.I * (2 if self.double and self.first_shared > 0 and l >= self.first_shared else 1)
    def kv_src(self, l):
        if l < self.first_shared: return l
        return max(j for j in range(self.first_shared) if self.types[j] == self.types[l])

# The tensors of a checkpoint: name -> shape (prefix "model." or "model.language_model.").
def tensor_shapes(s, prefix):
    t = {prefix + "embed_tokens.weight": (s.V, s.H), prefix + "norm.weight": (s.H,)}
    if s.P:
        t[prefix + "embed_tokens_per_layer.weight"] = (s.VP, s.L * s.P)
        t[prefix + "per_layer_model_projection.weight"] = (s.L * s.P, s.H)
        t[prefix + "per_layer_projection_norm.weight"] = (s.P,)
    for l in range(s.L):
        p, hd, kv, I = f"{prefix}layers.{l}.", s.head(l), s.kv_heads(l), s.inter(l)
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            t[p + n + ".weight"] = (s.H,)
        t[p + "self_attn.q_proj.weight"] = (s.nH * hd, s.H); t[p + "self_attn.o_proj.weight"] = (s.H, s.nH * hd)
        t[p + "self_attn.q_norm.weight"] = (hd,)
        if s.kv_src(l) == l:
            t[p + "self_attn.k_proj.weight"] = (kv * hd, s.H); t[p + "self_attn.k_norm.weight"] = (hd,)
            if s.has_v(l): t[p + "self_attn.v_proj.weight"] = (kv * hd, s.H)
        t[p + "mlp.gate_proj.weight"] = (I, s.H); t[p + "mlp.up_proj.weight"] = (I, s.H); t[p + "mlp.down_proj.weight"] = (s.H, I)
        if s.P:
            t[p + "per_layer_input_gate.weight"] = (s.P, s.H); t[p + "per_layer_projection.weight"] = (s.H, s.P)
            t[p + "post_per_layer_input_norm.weight"] = (s.H,)
        t[p + "layer_scalar"] = (1,)
    return t

def random_weights(shapes, gen, ple_dim):
    w = {}
    for name, shape in shapes.items():
        if name.endswith("layer_scalar"):
            v = 0.5 + 0.5 * torch.rand(shape, generator=gen)
        elif len(shape) == 1:                         # norm weights near 1 (Gemma4RMSNorm multiplies by w itself)
            v = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif "embed_tokens" in name:                  # rows of norm ~1 (the forward scales them by sqrt(dim), as real ones)
            v = torch.randn(shape, generator=gen) / math.sqrt(ple_dim if "per_layer" in name else shape[1])
        else:                                         # Linear [out, in]
            v = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        w[name] = v.to(torch.bfloat16)
    return w

# ---------------------------------------------------------------------------------------------------------
# the standalone forward (fp32)

def rms(x, w, eps):
    ms = x.pow(2).mean(-1, keepdim=True) + eps
    y = x * torch.pow(ms, -0.5)
    return y * w if w is not None else y

def inv_freq(s, full):
    r = s.rope["full_attention" if full else "sliding_attention"]
    theta = r["rope_theta"]
    if full and r.get("rope_type", "default") == "proportional":
        hd = s.ghd
        angles = int(r.get("partial_rotary_factor", 1.0) * hd // 2)
        f = 1.0 / (theta ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / hd))
        f = torch.cat([f, torch.zeros(hd // 2 - angles)]) if hd // 2 > angles else f
        return f / r.get("factor", 1.0)
    hd = s.hd
    return 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))

def rope(x, pos, f):   # x [T, heads, hd]
    freqs = pos[:, None].float() * f[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin

def forward(W, s, prefix, ids):
    """ids: 1-D LongTensor of the whole sequence. Returns logits [T, V] and hidden_states [L+1, T, H]."""
    w = {k: v.float() for k, v in W.items()}
    g = lambda n: w[prefix + n]
    T = ids.shape[0]
    pos = torch.arange(T)
    x = g("embed_tokens.weight")[ids] * torch.tensor(s.H ** 0.5)
    hs = [x]
    if s.P:
        tok = (g("embed_tokens_per_layer.weight")[ids] * torch.tensor(s.P ** 0.5)).reshape(T, s.L, s.P)
        ctx = (x @ g("per_layer_model_projection.weight").T) * (s.H ** -0.5)
        ctx = rms(ctx.reshape(T, s.L, s.P), g("per_layer_projection_norm.weight"), s.eps)
        ple = (ctx + tok) * (2.0 ** -0.5)
    freqs = {False: inv_freq(s, False), True: inv_freq(s, True)}
    causal = pos[None, :] <= pos[:, None]
    window = pos[None, :] > pos[:, None] - s.W
    kv = {}
    h = x
    for l in range(s.L):
        p = f"layers.{l}."
        full, hd, nkv = s.full(l), s.head(l), s.kv_heads(l)
        a = rms(h, g(p + "input_layernorm.weight"), s.eps)
        q = rms((a @ g(p + "self_attn.q_proj.weight").T).view(T, s.nH, hd), g(p + "self_attn.q_norm.weight"), s.eps)
        q = rope(q, pos, freqs[full])
        if s.kv_src(l) == l:
            k = (a @ g(p + "self_attn.k_proj.weight").T).view(T, nkv, hd)
            v = (a @ g(p + "self_attn.v_proj.weight").T).view(T, nkv, hd) if s.has_v(l) else k
            k = rope(rms(k, g(p + "self_attn.k_norm.weight"), s.eps), pos, freqs[full])
            v = rms(v, None, s.eps)
            kv[l] = (k, v)
        k, v = kv[s.kv_src(l)]
        rep = s.nH // nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        sc = torch.einsum("qhd,khd->hqk", q, k) * 1.0
        mask = causal & window if not full else causal
        sc = sc.masked_fill(~mask[None], float("-inf"))
        att = torch.einsum("hqk,khd->qhd", torch.softmax(sc, -1), v).reshape(T, s.nH * hd)
        o = rms(att @ g(p + "self_attn.o_proj.weight").T, g(p + "post_attention_layernorm.weight"), s.eps)
        h = h + o
        m = rms(h, g(p + "pre_feedforward_layernorm.weight"), s.eps)
        m = torch.nn.functional.gelu(m @ g(p + "mlp.gate_proj.weight").T, approximate="tanh") * (m @ g(p + "mlp.up_proj.weight").T)
        m = rms(m @ g(p + "mlp.down_proj.weight").T, g(p + "post_feedforward_layernorm.weight"), s.eps)
        h = h + m
        if s.P:
            e = torch.nn.functional.gelu(h @ g(p + "per_layer_input_gate.weight").T, approximate="tanh") * ple[:, l, :]
            e = rms(e @ g(p + "per_layer_projection.weight").T, g(p + "post_per_layer_input_norm.weight"), s.eps)
            h = h + e
        h = h * g(p + "layer_scalar")
        hs.append(h)
    h = rms(h, g("norm.weight"), s.eps)
    hs[-1] = h
    head = w["lm_head.weight"] if "lm_head.weight" in w else g("embed_tokens.weight")
    logits = h @ head.T
    if s.cap:
        logits = torch.tanh(logits / s.cap) * s.cap
    return logits, torch.stack(hs)

# ---------------------------------------------------------------------------------------------------------
# the expected vectors (tensor names of ../shared/fixtures/target.expect.safetensors)

N_PROMPT, N_GREEDY, N_BLOCK = 12, 32, 8

def prompt_for(V):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, V, (N_PROMPT,), generator=g)

def expect_standalone(W, s, prefix, prompt=None):
    with torch.no_grad():
        prompt = prompt_for(s.V) if prompt is None else prompt
        logits, hs = forward(W, s, prefix, prompt)
        t = {"prompt_ids": prompt.to(torch.int32), "prefill_logits": logits, "prefill_hidden_states": hs}
        seq, ids, steps = prompt.tolist(), [], []
        last = logits[-1]
        for i in range(N_GREEDY):
            tok = int(torch.argmax(last))
            ids.append(tok); steps.append(last.clone()); seq.append(tok)
            if i + 1 < N_GREEDY:
                last = forward(W, s, prefix, torch.tensor(seq))[0][-1]
        t["greedy_ids"] = torch.tensor(ids, dtype=torch.int32)
        t["greedy_step_logits"] = torch.stack(steps)
        block = torch.tensor(ids[:N_BLOCK])
        logits, hs = forward(W, s, prefix, torch.cat([prompt, block]))
        t["block_ids"] = block.to(torch.int32)
        t["block_logits"] = logits[N_PROMPT:]
        t["block_hidden_states"] = hs[:, N_PROMPT:]
    return {k: v.float().contiguous() if v.dtype != torch.int32 else v.contiguous() for k, v in t.items()}

def expect_transformers(d, cfg, prompt):
    import transformers
    cls = getattr(transformers, cfg["architectures"][0])
    try:
        m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    with torch.no_grad():
        prompt = prompt[None]
        o = m(input_ids=prompt, output_hidden_states=True, use_cache=True)
        t = {"prompt_ids": prompt[0].to(torch.int32), "prefill_logits": o.logits[0].float(),
             "prefill_hidden_states": torch.stack([h[0] for h in o.hidden_states]).float()}
        cache, last, ids, steps = o.past_key_values, o.logits[0, -1], [], []
        for i in range(N_GREEDY):
            tok = int(torch.argmax(last))
            ids.append(tok); steps.append(last.float().clone())
            o = m(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            cache, last = o.past_key_values, o.logits[0, -1]
        t["greedy_ids"] = torch.tensor(ids, dtype=torch.int32)
        t["greedy_step_logits"] = torch.stack(steps)
        block = torch.tensor([ids[:N_BLOCK]])
        o = m(input_ids=prompt, use_cache=True)
        o2 = m(input_ids=block, past_key_values=o.past_key_values, use_cache=True, output_hidden_states=True)
        t["block_ids"] = block[0].to(torch.int32)
        t["block_logits"] = o2.logits[0].float()
        t["block_hidden_states"] = torch.stack([h[0] for h in o2.hidden_states]).float()
    return {k: v.contiguous() for k, v in t.items()}, transformers.__version__

def compare(a, b, what):
    worst, ok = 0.0, True
    for k in a:
        if k not in b or a[k].shape != b[k].shape:
            print(f"  {what}: {k}: shape {tuple(a[k].shape)} vs {tuple(b[k].shape) if k in b else 'missing'}"); ok = False; continue
        if a[k].dtype == torch.int32:
            same = torch.equal(a[k], b[k])
            print(f"  {what}: {k}: {'identical' if same else 'DIFFERENT: ' + str(a[k].tolist()) + ' vs ' + str(b[k].tolist())}")
            ok &= same
        else:
            d = (a[k] - b[k]).abs().max().item()
            worst = max(worst, d)
            print(f"  {what}: {k}: max abs diff {d:.3g} (values up to {a[k].abs().max().item():.3g})")
            ok &= d <= 1e-3
    return ok

# ---------------------------------------------------------------------------------------------------------

def load_checkpoint(d):
    with open(os.path.join(d, "config.json")) as f: cfg = json.load(f)
    s = Shape(text_of(cfg))
    W = st_load(os.path.join(d, "model.safetensors"))
    prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in W) else "model."
    return cfg, s, W, prefix

def make(out):
    os.makedirs(out, exist_ok=True)
    for i, (name, cfg) in enumerate(CHECKPOINTS.items()):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        s = Shape(text_of(cfg))
        prefix = "model.language_model." if cfg["architectures"][0] == "Gemma4ForConditionalGeneration" else "model."
        W = random_weights(tensor_shapes(s, prefix), torch.Generator().manual_seed(1234 + i), s.P)
        with open(os.path.join(d, "config.json"), "w") as f: json.dump(cfg, f, indent=2)
        st_save(W, os.path.join(d, "model.safetensors"))
        cfg, s, W, prefix = load_checkpoint(d)     # what the files hold, as every reader sees it
        t = expect_standalone(W, s, prefix)
        st_save(t, os.path.join(out, name + ".expect.safetensors"))
        print(f"{name}: {len(W)} tensors, greedy ids {t['greedy_ids'].tolist()[:16]}...")

def check(out, rewrite):
    ok = True
    for name in CHECKPOINTS:
        d = os.path.join(out, name)
        if not os.path.isdir(d): continue
        cfg, s, W, prefix = load_checkpoint(d)
        path = os.path.join(out, name + ".expect.safetensors")
        stored = st_load(path) if os.path.exists(path) else None
        # the stored prompt when there is one (torch versions need not draw the same random ids)
        prompt = stored["prompt_ids"].long() if stored is not None else prompt_for(s.V)
        try:
            tf, version = expect_transformers(d, cfg, prompt)
        except Exception:
            import traceback
            traceback.print_exc()
            print(f"{name}: transformers could not run it (above)")
            ok = False
            continue
        print(f"{name}: transformers {version} {cfg['architectures'][0]} against the standalone reference")
        ok &= compare(tf, expect_standalone(W, s, prefix, prompt), "transformers vs standalone")
        if stored is not None:
            ok &= compare(tf, stored, "transformers vs " + os.path.basename(path))
        if rewrite:
            st_save(tf, path, {"format": "pt", "made_by": "transformers " + version})
            print(f"  wrote {path} from transformers' outputs")
    print("ALL MATCH" if ok else "MISMATCH (see above)")
    return 0 if ok else 1

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemma4")
    if "--check-transformers" in sys.argv or "--from-transformers" in sys.argv:
        sys.exit(check(out, "--from-transformers" in sys.argv))
    make(out)
