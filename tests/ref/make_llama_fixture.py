# Reference vectors for Llama-3.x targets, made by transformers' own LlamaForCausalLM (run on the device
# machine, which has torch + transformers 5.17; nothing here is needed to run the tests).
#
#   python3 tests/ref/make_llama_fixture.py OUT_DIR
#
# Writes OUT_DIR/<name>/ (config.json + model.safetensors, bf16, saved with save_pretrained as users get them)
# and OUT_DIR/<name>.expect.safetensors with the same tensor names as ../shared/fixtures/target.expect
# (prompt_ids, prefill_logits, prefill_hidden_states, greedy_ids, greedy_step_logits, block_ids, block_logits,
# block_hidden_states). Expected values are computed in fp32 on the CPU, eager attention, from the saved bf16
# weights reloaded with from_pretrained, so they are what a user's transformers computes from those files.
#
# Two checkpoints:
#   llama3       transformers-5 config (rope_parameters), llama3 RoPE scaling, untied head, GQA 4/2, head_dim 16
#   llama_tied   a transformers-4 style config.json (top-level rope_theta + rope_scaling, as Llama-3.1/3.2
#                ship), tied embeddings, 3 query heads / 1 KV head of 32
# The llama3 scaling is made visible at these tiny sizes by a small original_max_position_embeddings (64):
# wavelengths above 64 are divided by the factor, 16..64 are smoothed, so positions 0..70 exercise all three.
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(1234)

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}

def randomise(model):
    # O(1) activations and logits: unit-variance embeddings, 1/sqrt(fan_in) linears, norms near 1
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 2:
                p.copy_(torch.randn_like(p) / (p.shape[1] ** 0.5 if "embed" not in name else 1.0))
            else:
                p.copy_(0.1 * torch.randn_like(p))

def expect(model, vocab):
    model.eval()
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, vocab, (1, 12), generator=g)
    with torch.no_grad():
        o = model(prompt, output_hidden_states=True, use_cache=True)
        t = {"prompt_ids": prompt[0].to(torch.int32),
             "prefill_logits": o.logits[0].float(),
             "prefill_hidden_states": torch.stack([h[0] for h in o.hidden_states]).float()}
        cache = o.past_key_values
        logits = o.logits[0, -1]
        ids, step_logits = [], []
        for i in range(48):
            tok = int(torch.argmax(logits))
            ids.append(tok); step_logits.append(logits.float().clone())
            o = model(torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            logits = o.logits[0, -1]
        t["greedy_ids"] = torch.tensor(ids, dtype=torch.int32)
        t["greedy_step_logits"] = torch.stack(step_logits)
        block = torch.tensor([ids[:8]])
        o = model(prompt, use_cache=True)
        o2 = model(block, past_key_values=o.past_key_values, use_cache=True, output_hidden_states=True)
        t["block_ids"] = block[0].to(torch.int32)
        t["block_logits"] = o2.logits[0].float()
        t["block_hidden_states"] = torch.stack([h[0] for h in o2.hidden_states]).float()
    return {k: v.contiguous() for k, v in t.items()}

def make(name, cfg, t4_config=None):
    d = os.path.join(out, name)
    m = LlamaForCausalLM(cfg)
    randomise(m)
    m.to(torch.bfloat16).save_pretrained(d)
    if t4_config is not None:          # rewrite config.json as transformers 4 wrote it (what Llama-3.x repos ship)
        with open(os.path.join(d, "config.json")) as f: c = json.load(f)
        c.pop("rope_parameters", None)
        c.update(t4_config)
        with open(os.path.join(d, "config.json"), "w") as f: json.dump(c, f, indent=2)
    m2 = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    print(name, "rope:", getattr(m2.config, "rope_parameters", None), "tied:", m2.config.tie_word_embeddings)
    save_file(expect(m2, cfg.vocab_size), os.path.join(out, name + ".expect.safetensors"))

make("llama3", LlamaConfig(vocab_size=384, hidden_size=64, intermediate_size=192, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                           max_position_embeddings=512, tie_word_embeddings=False,
                           rope_parameters=dict(LLAMA3, rope_theta=10000.0)))
make("llama_tied", LlamaConfig(vocab_size=320, hidden_size=96, intermediate_size=256, num_hidden_layers=3,
                               num_attention_heads=3, num_key_value_heads=1, rms_norm_eps=1e-5,
                               max_position_embeddings=512, tie_word_embeddings=True,
                               rope_parameters=dict(LLAMA3, rope_theta=500000.0)),
     t4_config={"rope_theta": 500000.0, "rope_scaling": dict(LLAMA3), "tie_word_embeddings": True})
