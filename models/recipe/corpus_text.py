#!/usr/bin/env python3
"""Plain-text training corpus for the built-in model, from unpacked Debian packages.

Usage: corpus_text.py ROOT OUT
  ROOT: a folder where the packages listed in build_corpus.sh were unpacked (dpkg -x), plus
        ROOT/Translation-en (Debian's English package descriptions, plain text).
  OUT:  receives {code,prose,dialogue}.{train,heldout}.txt and manifest.json.

Documents are joined by the end-of-text token on a line of its own, so `blockspec tokenize --corpus`
can split them. Held-out sets are whole documents (source files, books, fortune files, packages),
chosen by a hash of the document's name, never by position inside a document.
"""
import hashlib, io, json, os, re, struct, subprocess, sys, tarfile, zlib

EOT = "<|endoftext|>"
KERNEL_DIRS = ("kernel/", "mm/", "fs/", "net/", "lib/", "include/")


def heldout(name, per_mille):
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 1000 < per_mille


def clean(text):
    text = text.replace("\r\n", "\n")
    return re.sub(r"\n{4,}", "\n\n\n", text).strip("\n") + "\n"


def kernel_docs(root):
    tar = os.path.join(root, "usr/src/linux-source-6.1.tar.xz")
    xz = subprocess.Popen(["xz", "-dc", tar], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=xz.stdout, mode="r|") as tf:
        for m in tf:
            if not m.isfile():
                continue
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if rel.startswith(KERNEL_DIRS) and rel.endswith((".c", ".h")):
                data = tf.extractfile(m).read().decode("utf-8", "replace")
                yield "linux/" + rel, "// " + rel + "\n" + clean(data)
    xz.wait()


def web_bible_docs(root):
    """The World English Bible from its SWORD zText module: one zlib block per book (BlockType=BOOK)."""
    base = os.path.join(root, "usr/share/sword/modules/texts/ztext/engWEB2015eb/")
    for testament in ("ot", "nt"):
        bzs = open(base + testament + ".bzs", "rb").read()
        bzz = open(base + testament + ".bzz", "rb").read()
        for b in range(len(bzs) // 12):
            off, size, _ = struct.unpack_from("<III", bzs, 12 * b)
            osis = zlib.decompress(bzz[off:off + size]).decode("utf-8", "replace")
            osis = re.sub(r"<note\b.*?</note>", "", osis, flags=re.S)          # footnotes and cross-references
            osis = re.sub(r"<title\b[^>]*>(.*?)</title>", r"\n\n\1\n\n", osis, flags=re.S)
            osis = re.sub(r"<(div|p|lg|l)\b[^>]*[eE]ID=[^>]*/>|</(p|l|lg)>", "\n", osis)
            text = re.sub(r"<[^>]+>", "", osis)
            text = re.sub(r"[ \t]+", " ", text)
            text = "\n".join(line.strip() for line in text.split("\n"))
            if len(text.strip()) > 200:
                yield "web/%s%03d" % (testament, b), clean(text)


def austen_docs(root):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import janeausten_text as ja
    rdb = os.path.join(root, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb")
    for name, rec in zip(ja.BOOKS, ja.records(open(rdb, "rb").read())):
        yield "austen/" + name, clean("\n".join(ja.strsxp_lines(rec)))


def fortune_docs(root):
    d = os.path.join(root, "usr/share/games/fortunes")
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if f.endswith((".dat", ".u8")) or os.path.islink(p) or not os.path.isfile(p):
            continue
        text = open(p, encoding="utf-8", errors="replace").read()
        yield "fortunes/" + f, clean(text)


def jargon_docs(root):
    import gzip
    text = gzip.open(os.path.join(root, "usr/share/doc/jargon-text/jargon.txt.gz"), "rt", errors="replace").read()
    # ~64 KB documents cut at paragraph breaks, so held-out pieces are whole entries.
    doc, n = [], 0
    for i, para in enumerate(text.split("\n\n")):
        doc.append(para)
        n += len(para)
        if n > 65536:
            yield "jargon/%04d" % i, clean("\n\n".join(doc))
            doc, n = [], 0
    if doc:
        yield "jargon/end", clean("\n\n".join(doc))


def description_docs(root):
    """Instruction/answer pairs from Debian's English package descriptions, in the chat template's form."""
    text = open(os.path.join(root, "Translation-en"), encoding="utf-8", errors="replace").read()
    seen = set()
    for rec in text.split("\n\n"):
        pkg = re.search(r"^Package: (\S+)", rec, re.M)
        desc = re.search(r"^Description-en: (.*(?:\n .*)*)", rec, re.M)
        if not pkg or not desc:
            continue
        lines = desc.group(1).split("\n")
        short, body = lines[0].strip(), []
        for line in lines[1:]:
            line = line[1:]
            body.append("" if line.strip() == "." else line)
        key = short + "\n".join(body)
        if key in seen:          # -data/-doc siblings often repeat a description word for word
            continue
        seen.add(key)
        answer = short[0].upper() + short[1:] + "." if short else ""
        if any(b.strip() for b in body):
            answer += "\n\n" + "\n".join(body).strip()
        q = "What is the Debian package %s?" % pkg.group(1)
        yield "debian/" + pkg.group(1), ("<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n"
                                         % (q, answer))


DOMAINS = {
    "code": [("linux-source-6.1", "GPL-2.0 (the Linux kernel)", kernel_docs, 20)],
    "prose": [("sword-text-web", "public domain (World English Bible)", web_bible_docs, 60),
              ("r-cran-janeaustenr", "public domain texts (package: MIT)", austen_docs, 170),
              ("fortunes", "BSD fortune files (Debian: various free licences)", fortune_docs, 100),
              ("jargon-text", "public domain (the Jargon File 4.4.7)", jargon_docs, 60)],
    "dialogue": [("Translation-en", "Debian package descriptions (each under its package's DFSG licence)",
                  description_docs, 20)],
}


def main():
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    manifest = {"end_of_text": EOT, "domains": {}}
    for domain, sources in DOMAINS.items():
        files = {s: open(os.path.join(out, "%s.%s.txt" % (domain, s)), "w") for s in ("train", "heldout")}
        info = []
        for package, licence, fn, per_mille in sources:
            n = {"train": [0, 0], "heldout": [0, 0]}
            for name, text in fn(root):
                split = "heldout" if heldout(name, per_mille) else "train"
                files[split].write(text + EOT + "\n")
                n[split][0] += 1
                n[split][1] += len(text.encode())
            info.append({"source": package, "licence": licence, "heldout_per_mille": per_mille,
                         "train_docs": n["train"][0], "train_bytes": n["train"][1],
                         "heldout_docs": n["heldout"][0], "heldout_bytes": n["heldout"][1]})
            print("%-9s %-20s train %6d docs %11d B   held-out %5d docs %10d B" % (
                domain, package, n["train"][0], n["train"][1], n["heldout"][0], n["heldout"][1]), flush=True)
        for f in files.values():
            f.close()
        manifest["domains"][domain] = info
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
