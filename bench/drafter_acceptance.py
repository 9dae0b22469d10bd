#!/usr/bin/env python3
"""Acceptance of several drafters of the built-in target on held-out prompts, greedy and at temperature 1.

For each drafter folder and each domain (HELDOUT_DIR/{code,prose,dialogue}.heldout.txt, the prompts
builtin_speedup.py uses), runs `blockspec generate -d DRAFTER --json` on N prompts for TOKENS tokens with
--draft-max = the drafter's block, greedy and sampled (--temp 1, seeds 1..N), and prints tau (tokens per
round) and the acceptance rate per draft position (accepted / verified, pooled over the prompts). These are
counts, not timings: a busy machine gives the same figures.
Usage: bench/drafter_acceptance.py HELDOUT_DIR N TOKENS NAME=DIR [NAME=DIR ...]"""
import json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from builtin_speedup import BIN, prompts  # noqa: E402


def block_of(d):
    c = json.load(open(os.path.join(d, "config.json")))
    # z-lab layouts (DFlash, DFlash 2): row 0 is the anchor, B - 1 drafts
    return c.get("block_size", 4) - (1 if c.get("architectures", [""])[0] in ("DFlashDraftModel", "DFlash2DraftModel") else 0)


def stats(drafter, prompt, tokens, dm, temp, seed):
    cmd = [BIN, "generate", "-d", drafter, "-p", prompt, "-n", str(tokens), "--json", "--ignore-eos", "--draft-max", str(dm)]
    if temp:
        cmd += ["--temp", str(temp), "--seed", str(seed)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("%s failed: %s" % (" ".join(cmd), r.stderr))
    return json.loads(r.stdout)["stats"]


def main():
    d, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    drafters = [a.split("=", 1) for a in sys.argv[4:]]
    print("| drafter | domain | sampling | tau | acceptance by position |")
    print("|---|---|---|---|---|")
    for name, path in drafters:
        dm = block_of(path)
        for dom in ("code", "prose", "dialogue"):
            ps = prompts(os.path.join(d, dom + ".heldout.txt"), n)
            for temp in (0, 1):
                rounds = gen = 0  # tau = tokens per round, as --stats
                acc, ver = [0.0] * dm, [0.0] * dm
                for i, p in enumerate(ps):
                    s = stats(path, p, tokens, dm, temp, i + 1)
                    # acceptance_lengths: tokens per round (drafts accepted + the target's own token); draft
                    # position k counts as verified in a round whose first k drafts were all accepted
                    for L in s["acceptance_lengths"]:
                        a = L - 1
                        rounds += 1
                        gen += L
                        for k in range(dm):
                            if k <= a:
                                ver[k] += 1
                            if k < a:
                                acc[k] += 1
                tau = gen / rounds if rounds else 0
                print("| %s | %s | %s | %.2f | %s |" % (name, dom, "temp 1" if temp else "greedy", tau,
                      " ".join("%.2f" % (acc[k] / ver[k] if ver[k] else 0) for k in range(dm))), flush=True)


if __name__ == "__main__":
    main()
