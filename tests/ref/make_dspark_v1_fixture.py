# Reference vectors for the seed's own DSpark v1 drafter (docs/dspark-v1.md): a standalone PyTorch reference written
# here from the seed's TypeScript, mlx-bun 0.0.9 package/src/spec/dspark/module.ts (DSparkDrafter: initFromDims,
# #layer, #buildSeq, #backbone, #baseLogits, #markov, #confidence, forwardInfer, save) and sample.ts
# (shared/seeds/004_b514e3cf8073e92a.txt). Torch only (no MLX, no safetensors package, no network); runs on the CPU
# in a second under torch 1.13 or later:
#
#   python3 tests/ref/make_dspark_v1_fixture.py tests/ref/dspark_v1
#
# The target is tests/ref/dflash2/target (a random Qwen3ForCausalLM, bf16: H 64, V 256, rms_norm_eps 1e-6), read,
# not written. Writes OUT_DIR/adapter/ (dspark.json + model.safetensors, F32 as the seed saves its fp32 params, W2
# and the confidence head nonzero so the Markov walk and c_k are exercised) and OUT_DIR/dspark_v1.expect.safetensors:
#   ctx_hidden [A][H]          the context vectors (random, O(1); stand-ins for the target's final post-norm hidden)
#   anchors [A]                the anchor tokens
#   block_hidden [A][G][D]     h_1..h_G: the backbone's rows 1..G after out_norm
#   base_logits [A][G][V]      U_k = LM_head(out_proj(h_k))
#   step_logits [A][G][V]      L_k = U_k + W1[x_{k-1}] W2 along the greedy walk (x_0 = the anchor)
#   draft_tokens [A][G]        the greedy walk
#   conf_logits [A][G]         conf.w . [h_k ; W1[x_{k-1}]] + conf.b (pre-sigmoid), along the greedy walk
#   conf [A][G]                sigmoid of those
#   sample_temperature [1]     the sampled walk's temperature (top-k and top-p off)
#   walk_uniforms [A][G]       the uniform each sampled step draws at (inverse CDF in index order, as blockspec)
#   sampled_tokens [A][G]      the walk at that temperature
#   sampled_q [A][G][V]        q_k = softmax(L_k / T) given the sampled prefix: the distribution step k drew from
# Every value is fp32 on the CPU from the saved weights; the C test (tests/test_dspark_v1.c) allows 1e-3 absolute,
# ids exactly.
#
# Where the seed's code is ambiguous, and what this file (and blockspec) follows:
#  1. The context vector. The seed taps "the final post-norm hidden from model.forwardHidden" at "each anchor";
#     at inference hCtx is handed in beside anchorTok = "the bonus token", which the target has not run yet. Here:
#     the hidden state of the row BEFORE the anchor (the row whose logits produced it), the only one available
#     when drafting; blockspec reads the last committed context row (tap n_layers: after the final norm). (The
#     seed's training loop, which would say which row it paired with each anchor, is not in the seed.)
#  2. The head. #baseLogits calls model.logitsFromHidden(out_proj(h)), "shared head (+softcap)", on a hidden that
#     comes from out_proj: no target final norm is applied (the seed's hidden already stands for a post-norm one).
#     The Gemma-4 head's final soft-cap applies in that call; a Qwen3 / Llama head has none.
#  3. The head's input dtype. The seed casts out_proj's output to the embedding's scale dtype (bf16 for a
#     quantised Gemma head) before the head. blockspec's activations are fp32, and so is this reference.
#  4. geluApprox: MLX's gelu_approx, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (not erf, not the fast
#     sigmoid form).
#  5. RMSNorm: MLX's rms_norm, x * rsqrt(mean(x^2) + eps) * w (weight as is: no Gemma (1 + w)), eps = dims.eps.
#  6. Attention: bidirectional over all gamma + 1 rows (mask ""), no RoPE, no q/k norm, no biases, scale hd^-0.5.
#  7. The anchor embedding: the target's raw embedding row ("raw embedding, no scale"; Gemma's sqrt(H) is not
#     applied).
#  8. Draft count: forwardInfer's gamma may be below config.gamma (the backbone always runs config.gamma + 1 rows);
#     blockspec drafts min(draft-max, config.gamma).
#  9. Sampling: the seed processes logits as log-softmax, top-p, top-k, then / temperature (sample.ts
#     processLogits), and draws with MLX's categorical. blockspec processes the walk's L_k exactly as it processes
#     the target's logits (temperature, top-k, top-p, as transformers) and keeps that q for the rejection test:
#     lossless either way (the test needs only the q actually drawn from); here temperature only, inverse CDF.
# 10. Confidence with calibration: the seed has none; blockspec applies a calibration.json beside the adapter as
#     for DeepSpec's DSpark (docs/calibration.md). Not used here.
import json, os, struct, sys
import torch

torch.manual_seed(20261203)
out = sys.argv[1] if len(sys.argv) > 1 else "tests/ref/dspark_v1"
here = os.path.dirname(os.path.abspath(__file__))
target_dir = os.path.join(here, "dflash2", "target")

G, D, L, NH, R, FF = 5, 32, 2, 4, 8, 2     # gamma, dDraft, nLayers, nHeads, markovRank, ffMult
A = 3                                       # cases (context vector + anchor)
TEMP = 0.9

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    dt = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "I32": torch.int32}
    t = {}
    for k, v in hdr.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        t[k] = torch.frombuffer(bytearray(data[a:b]), dtype=dt[v["dtype"]]).reshape(v["shape"]).float()
    return t

def save_safetensors(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, (dtype, t) in tensors.items():
        t = t.contiguous()
        if dtype == "F32": b = t.float().contiguous().view(torch.int32).numpy().tobytes()
        else: b = t.to(torch.int32).numpy().tobytes()
        hdr[k] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

tcfg = json.load(open(os.path.join(target_dir, "config.json")))
H, V, EPS = tcfg["hidden_size"], tcfg["vocab_size"], tcfg["rms_norm_eps"]
tw = load_safetensors(os.path.join(target_dir, "model.safetensors"))
embed = tw["model.embed_tokens.weight"]
head = embed if tcfg.get("tie_word_embeddings") else tw["lm_head.weight"]
I = FF * D

# ---- the adapter: the seed's names and [in, out] shapes (initFromDims), random and scaled so activations are O(1)
def rn(*shape, std=1.0): return torch.randn(*shape) * std
p = {}
for i in range(L):
    p[f"bb.{i}.attn_norm"] = 1 + rn(D, std=0.1)
    for w in "qkvo": p[f"bb.{i}.{w}"] = rn(D, D, std=D ** -0.5)
    p[f"bb.{i}.ff_norm"] = 1 + rn(D, std=0.1)
    p[f"bb.{i}.gate"] = rn(D, I, std=D ** -0.5)
    p[f"bb.{i}.up"] = rn(D, I, std=D ** -0.5)
    p[f"bb.{i}.down"] = rn(I, D, std=I ** -0.5)
p["ctx_proj"] = rn(H, D, std=H ** -0.5)
p["tok_proj"] = rn(H, D, std=H ** -0.5 / max(embed.std().item(), 1e-3))
p["mask_emb"] = rn(G - 1, D, std=0.5)
p["pos_emb"] = rn(G + 1, D, std=0.5)
p["out_norm"] = 1 + rn(D, std=0.1)
p["out_proj"] = rn(D, H, std=D ** -0.5)
p["markov.w1"] = rn(V, R)
p["markov.w2"] = rn(R, V, std=0.5 * R ** -0.5)       # nonzero (the seed initialises it to 0): the walk matters
p["conf.w"] = rn(D + R, 1, std=(D + R) ** -0.5)
p["conf.b"] = torch.tensor([0.25])
names = [f"bb.{i}.{w}" for i in range(L) for w in ["attn_norm", "q", "k", "v", "o", "ff_norm", "gate", "up", "down"]]
names += ["ctx_proj", "tok_proj", "mask_emb", "pos_emb", "out_norm", "out_proj", "markov.w1", "markov.w2", "conf.w", "conf.b"]
assert set(names) == set(p)

# ---- the seed's forward
def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
def gelu_approx(x): return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

def layer(i, x):
    S, hd = x.shape[0], D // NH
    n = rms(x, p[f"bb.{i}.attn_norm"])
    q, k, v = [(n @ p[f"bb.{i}.{w}"]).reshape(S, NH, hd).transpose(0, 1) for w in "qkv"]
    a = torch.softmax((q @ k.transpose(1, 2)) * hd ** -0.5, dim=-1) @ v          # no mask: bidirectional
    x = x + a.transpose(0, 1).reshape(S, D) @ p[f"bb.{i}.o"]
    n = rms(x, p[f"bb.{i}.ff_norm"])
    return x + (gelu_approx(n @ p[f"bb.{i}.gate"]) * (n @ p[f"bb.{i}.up"])) @ p[f"bb.{i}.down"]

def backbone(hctx, anchor):
    pos = p["pos_emb"]
    rows = [hctx @ p["ctx_proj"] + pos[0], embed[anchor] @ p["tok_proj"] + pos[1]]
    rows += [p["mask_emb"][j] + pos[j + 2] for j in range(G - 1)]
    x = torch.stack(rows)
    for i in range(L): x = layer(i, x)
    return rms(x, p["out_norm"])[1:]                                               # drop the context row

def walk(hctx, anchor, temperature=0.0, uniforms=None):
    h = backbone(hctx, anchor)
    U = (h @ p["out_proj"]) @ head.t()                                             # the target's head, no final norm
    prev, toks, steps, zs, qs = anchor, [], [], [], []
    for k in range(G):
        e1 = p["markov.w1"][prev]
        lk = U[k] + e1 @ p["markov.w2"]
        if temperature <= 0:
            t = int(torch.argmax(lk))
            q = None
        else:
            q = torch.softmax(lk / temperature, dim=-1)
            cdf = torch.cumsum(q.double(), 0)
            point = uniforms[k] * float(cdf[-1])
            t = int((cdf <= point).sum())
            gap = min(abs(float(cdf[t]) - point), abs(point - (float(cdf[t - 1]) if t else 0.0)))
            assert gap > 1e-4, f"uniform {uniforms[k]} too close to a CDF step ({gap})"
        z = torch.cat([h[k], e1]) @ p["conf.w"][:, 0] + p["conf.b"][0]
        toks.append(t); steps.append(lk); zs.append(z); qs.append(q)
        prev = t
    return h, U, torch.stack(steps), toks, torch.stack(zs), qs

hctx = torch.randn(A, H)
anchors = [int(a) for a in torch.randint(0, V, (A,))]
uniforms = torch.tensor([[((k * 0.37 + a * 0.21 + 0.13) % 1.0) for k in range(G)] for a in range(A)]).float().double()   # the F32 values the file holds
ex = {k: [] for k in ["block_hidden", "base_logits", "step_logits", "draft_tokens", "conf_logits", "conf", "sampled_tokens", "sampled_q"]}
with torch.no_grad():
    for a in range(A):
        h, U, st, toks, z, _ = walk(hctx[a], anchors[a])
        ex["block_hidden"].append(h); ex["base_logits"].append(U); ex["step_logits"].append(st)
        ex["draft_tokens"].append(torch.tensor(toks)); ex["conf_logits"].append(z); ex["conf"].append(torch.sigmoid(z))
        _, _, _, stoks, _, qs = walk(hctx[a], anchors[a], TEMP, uniforms[a].tolist())
        ex["sampled_tokens"].append(torch.tensor(stoks)); ex["sampled_q"].append(torch.stack(qs))

os.makedirs(os.path.join(out, "adapter"), exist_ok=True)
save_safetensors(os.path.join(out, "adapter", "model.safetensors"), {k: ("F32", p[k]) for k in names})
meta = {"kind": "dspark-drafter", "version": 1, "target_id": "blockspec-tests/ref/dflash2/target",
        "config": {"gamma": G, "dDraft": D, "nLayers": L, "nHeads": NH, "markovRank": R, "ffMult": FF},
        "dims": {"hiddenSize": H, "vocabSize": V, "eps": EPS}, "param_names": names}
with open(os.path.join(out, "adapter", "dspark.json"), "w") as f: json.dump(meta, f, indent=2)
expect = {"ctx_hidden": ("F32", hctx), "anchors": ("I32", torch.tensor(anchors)),
          "sample_temperature": ("F32", torch.tensor([TEMP])), "walk_uniforms": ("F32", uniforms.float())}
for k, v in ex.items(): expect[k] = ("I32" if k.endswith("tokens") else "F32", torch.stack(v))
save_safetensors(os.path.join(out, "dspark_v1.expect.safetensors"), expect)
print("wrote", out, "greedy", [t.tolist() for t in ex["draft_tokens"]], "sampled", [t.tolist() for t in ex["sampled_tokens"]])
