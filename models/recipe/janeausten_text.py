#!/usr/bin/env python3
"""Jane Austen's six novels as plain text, from Debian's r-cran-janeaustenr (no R needed).

The package keeps each novel as an R character vector (one element per line) in the lazy-load database
data/Rdata.rdb: records of [4-byte big-endian length][zlib stream] holding R's XDR serialisation. This reads
just that: the version-2/3 header, then a STRSXP of CHARSXPs.  Usage: janeausten_text.py Rdata.rdb OUTDIR
"""
import os, struct, sys, zlib

BOOKS = ["emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility"]


def records(blob):
    pos = 0
    while pos < len(blob):
        dec = zlib.decompressobj()
        out = dec.decompress(blob[pos + 4:])
        pos = len(blob) - len(dec.unused_data)
        yield out


def strsxp_lines(ser):
    if ser[:2] != b"X\n":
        raise ValueError("not an XDR serialisation")
    i = 2
    ver, = struct.unpack(">i", ser[i:i + 4]); i += 12
    if ver == 3:
        n, = struct.unpack(">i", ser[i:i + 4]); i += 4 + n
    flags, n = struct.unpack(">ii", ser[i:i + 8]); i += 8
    if flags & 0xFF != 16:
        raise ValueError("record is not a character vector (type %d)" % (flags & 0xFF))
    lines = []
    for _ in range(n):
        f, ln = struct.unpack(">ii", ser[i:i + 8]); i += 8
        if f & 0xFF != 9:
            raise ValueError("element is not a CHARSXP")
        lines.append("" if ln < 0 else ser[i:i + ln].decode("utf-8", "replace"))
        i += max(ln, 0)
    return lines


def main():
    rdb, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    recs = list(records(open(rdb, "rb").read()))
    if len(recs) != len(BOOKS):
        sys.exit("%s: %d records, expected the %d novels" % (rdb, len(recs), len(BOOKS)))
    # The database holds the objects in name order, as R writes them (the .rdx index lists the same order).
    for name, rec in zip(BOOKS, recs):
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write("\n".join(strsxp_lines(rec)) + "\n")


if __name__ == "__main__":
    main()
