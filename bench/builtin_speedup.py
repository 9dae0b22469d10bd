#!/usr/bin/env python3
"""Plain vs speculative decoding with the built-in model on held-out prompts, on this machine.

For each domain's held-out text (models/recipe/corpus_text.py writes {code,prose,dialogue}.heldout.txt),
takes N documents, uses the first PROMPT_CHARS characters of each as the prompt, and runs `blockspec generate`
plainly (-d none) and speculatively (the built-in drafter, each --draft-max asked for), alternating, greedy,
-n TOKENS. Checks the output ids are identical, and prints decode tokens/s (tokens after the first per second
after the prefill, as --json reports them), tau, acceptance per position and the speedup, per domain.
BS_DRAFTER=DIR measures another drafter of the built-in target instead of the shipped one; BS_DEVICE=cuda runs
both on a GPU.
Usage: bench/builtin_speedup.py HELDOUT_DIR [N=6] [TOKENS=128] [DRAFT_MAX=1,2,3,4] [ROUNDS=2]"""
import json, os, subprocess, sys

BIN = os.environ.get("BS_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "blockspec"))
EOT = "<|endoftext|>"


def prompts(path, n, chars=240):
    docs = [d.strip("\n") for d in open(path, encoding="utf-8").read().split(EOT) if len(d.strip()) > chars]
    step = max(1, len(docs) // n)
    out = []
    for d in docs[::step][:n]:
        if d.startswith("<|im_start|>user"):            # dialogue: the user turn, then the assistant's reply is generated
            out.append(d[:d.index("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")])
        else:
            out.append(d[:chars])
    return out


def run(prompt, tokens, drafter, draft_max):
    cmd = [BIN, "generate", "-p", prompt, "-n", str(tokens), "--json", "--ignore-eos"]
    if os.environ.get("BS_DEVICE"):
        cmd += ["--device", os.environ["BS_DEVICE"]]
    cmd += ["-d", "none"] if drafter is None else ["--draft-max", str(draft_max)]
    if drafter is not None and os.environ.get("BS_DRAFTER"):      # another drafter than the built-in one
        cmd += ["-d", os.environ["BS_DRAFTER"]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("%s failed: %s" % (" ".join(cmd[:3]), r.stderr))
    return json.loads(r.stdout)


def main():
    d = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    dms = [int(x) for x in (sys.argv[4] if len(sys.argv) > 4 else "1,2,3,4").split(",")]
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    print("| domain | draft-max | plain tok/s | speculative tok/s | speedup | tau | acceptance by position | outputs equal |")
    print("|---|---|---|---|---|---|---|---|")
    for dom in ("code", "prose", "dialogue"):
        ps = prompts(os.path.join(d, dom + ".heldout.txt"), n)
        for dm in dms:
            tp = ts = 0.0
            acc, tau, same, k = [], [], True, 0
            for _ in range(rounds):
                for p in ps:
                    a = run(p, tokens, None, dm)
                    b = run(p, tokens, "builtin", dm)
                    same &= a["output_ids"] == b["output_ids"]
                    tp += a["stats"]["t_decode_s"]
                    ts += b["stats"]["t_total_s"] - b["stats"]["t_prefill_s"]
                    k += len(a["output_ids"]) - 1
                    tau.append(b["stats"]["tau"])
                    acc.append(b["stats"]["acceptance_by_position"])
            mean_acc = [sum(x[i] for x in acc if len(x) > i) / len(acc) for i in range(dm)]
            print("| %s | %d | %.1f | %.1f | %.2fx | %.2f | %s | %s |" % (
                dom, dm, k / tp, k / ts, tp / ts, sum(tau) / len(tau), " ".join("%.2f" % x for x in mean_acc),
                "yes" if same else "NO"), flush=True)


if __name__ == "__main__":
    main()
