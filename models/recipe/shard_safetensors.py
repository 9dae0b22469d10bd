#!/usr/bin/env python3
"""Cuts one safetensors file into shards of at most MAX_MIB each (whole tensors) plus the
model.safetensors.index.json that transformers and blockspec read, so every file in the repository
stays under 16 MiB.  --drop NAMES leaves those tensors out (the built-in drafters drop DeepSpec's bundled
copies of the target's embed_tokens / lm_head: blockspec then shares the target's, bit for bit the same).
Usage: shard_safetensors.py IN.safetensors OUTDIR [MAX_MIB=15] [--drop NAME,NAME]"""
import json, os, struct, sys


def read(path):
    with open(path, "rb") as f:
        n, = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    return header, data, meta


def write(path, tensors, meta):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, (info, blob) in tensors:
        header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    args, drop = sys.argv[1:], set()
    if "--drop" in args:
        i = args.index("--drop")
        drop = set(args[i + 1].split(","))
        del args[i:i + 2]
    src, out = args[0], args[1]
    limit = int(float(args[2]) if len(args) > 2 else 15) * 1024 * 1024
    header, data, meta = read(src)
    missing = drop - set(header)
    if missing:
        sys.exit("%s has no tensor %s to drop" % (src, ", ".join(sorted(missing))))
    for name in drop:
        del header[name]
    shards, cur, size = [], [], 0
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        a, b = header[name]["data_offsets"]
        if cur and size + (b - a) > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, (header[name], data[a:b])))
        size += b - a
    shards.append(cur)
    os.makedirs(out, exist_ok=True)
    index = {"metadata": {"total_size": sum(h["data_offsets"][1] - h["data_offsets"][0] for h in header.values())},
             "weight_map": {}}
    for i, shard in enumerate(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write(os.path.join(out, fname), shard, meta)
        for name, _ in shard:
            index["weight_map"][name] = fname
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print("%s: %d tensors in %d shards" % (out, len(header), len(shards)))


if __name__ == "__main__":
    main()
