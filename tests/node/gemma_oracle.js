// Gemma-style (SentencePiece BPE) tokenizer tests: the fixture and Hugging Face tokenizers' answers for it.
//   node tests/node/gemma_oracle.js --make DIR   trains the small fixture DIR/tokenizer.json (+ tokenizer_config.json)
//                                                 (deterministic; committed as tests/ref/gemma_tok)
//   node tests/node/gemma_oracle.js FIXTURE_DIR OUTDIR
//       writes, for each variant V (gemma, gemma3style, gemma_unk, gemma_unk_nofuse, llama2style):
//       OUTDIR/V.json      the tokenizer.json used
//       OUTDIR/V.bin       encode records as oracle.js writes them: u32 len, raw bytes, u32 0, u32 n, n x i32 ids
//       OUTDIR/V.dec.bin   decode records: u32 skip_special, u32 n, n x i32 ids, u32 len, the text tokenizers decodes
// The layout follows what transformers writes for Gemma 3 / Gemma 4 (GemmaConverter, GemmaTokenizer): normalizer
// Replace " " -> U+2581, pre_tokenizer Split " " MergedWithPrevious (Gemma 4; null in Gemma 3's files), BPE with
// byte_fallback and fuse_unk, "\t" in place of <0x09>, merges as pairs, <bos> from TemplateProcessing, decoder
// Replace U+2581 -> " ", ByteFallback, Fuse; special tokens as added tokens that are not normalised.
'use strict';
const fs = require('fs'), path = require('path');
const { gen } = require('./corpus.js');

const SP = '\u2581';
const SPECIALS = ['<pad>', '<eos>', '<bos>', '<unk>', '<mask>', '<start_of_turn>', '<end_of_turn>', '<|turn>', '<turn|>',
  '<start_of_image>', '<|image|>', '<|tool_call>'];

// A small BPE in the SentencePiece manner: words are pieces of the text with spaces as U+2581 (a word starts at
// a U+2581 run's last one; whitespace runs are pieces of their own), characters seen fewer than 4 times are left
// to the byte fallback, then the most frequent pair is merged (ties: the pair first seen) N times.
function train(text, nMerges) {
  const t = text.replace(/ /g, SP);
  const counts = new Map();
  for (const w of t.match(new RegExp(`${SP}*[^${SP}\\s]+|${SP}+|\\s+`, 'gu')) || []) counts.set(w, (counts.get(w) || 0) + 1);
  const chars = new Map();
  for (const [w, c] of counts) for (const ch of w) chars.set(ch, (chars.get(ch) || 0) + c);
  const alphabet = [...chars].filter(([ch, c]) => c >= 4 && ch !== '\t').map(([ch]) => ch);
  const known = new Set(alphabet);
  const words = [...counts].map(([w, c]) => ({ sym: [...w].map((ch) => (known.has(ch) ? ch : null)), c }));
  const merges = [];
  for (let k = 0; k < nMerges; k++) {
    const pairs = new Map();
    for (const w of words) for (let i = 0; i + 1 < w.sym.length; i++) {
      if (w.sym[i] === null || w.sym[i + 1] === null) continue;
      const key = w.sym[i] + '\u0000' + w.sym[i + 1];
      pairs.set(key, (pairs.get(key) || 0) + w.c);
    }
    let best = null, bc = 1;
    for (const [key, c] of pairs) if (c > bc) { best = key; bc = c; }
    if (!best) break;
    const [a, b] = best.split('\u0000');
    merges.push([a, b]);
    for (const w of words) {
      const s = w.sym, o = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) { o.push(a + b); i++; } else o.push(s[i]);
      }
      w.sym = o;
    }
  }
  return { alphabet, merges };
}

function make(dir) {
  const corpus = Buffer.concat(gen(4242, 160000)).toString('utf8');
  const { alphabet, merges } = train(corpus, 1500);
  const vocab = {};
  let id = 0;
  for (const s of SPECIALS) vocab[s] = id++;
  for (let b = 0; b < 256; b++) {
    const name = '<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>';
    vocab[b === 9 ? '\t' : name] = id++;   // as transformers' Gemma files: a tab token in <0x09>'s place
  }
  for (const ch of alphabet) if (!(ch in vocab)) vocab[ch] = id++;
  for (const [a, b] of merges) if (!((a + b) in vocab)) vocab[a + b] = id++;
  // Added tokens: the specials (special, not normalised), and user-defined ones as Gemma has (HTML tags,
  // whitespace runs, unused slots) that are not special; one normalised token with a space, one with lstrip/rstrip.
  const added = SPECIALS.map((s) => ({ id: vocab[s], content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const user = ['<unused0>', '<unused1>', '<table>', '</table>', SP + SP, '\n\n\n', '<h1>'];
  for (const s of user) {
    if (!(s in vocab)) vocab[s] = id++;
    added.push({ id: vocab[s], content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
  }
  added.push({ id: id++, content: ' magic word', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false });
  added.push({ id: id++, content: '<stripme>', single_word: false, lstrip: true, rstrip: true, normalized: false, special: true });
  const tok = {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: { type: 'Replace', pattern: { String: ' ' }, content: SP },
    pre_tokenizer: { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithPrevious', invert: false },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<bos>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<bos>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<bos>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<bos>': { id: '<bos>', ids: [vocab['<bos>']], tokens: ['<bos>'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: SP }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok) + '\n');
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<bos>', eos_token: '<eos>', pad_token: '<pad>',
    unk_token: '<unk>', add_bos_token: true, add_eos_token: false, tokenizer_class: 'GemmaTokenizer' }, null, 1) + '\n');
  console.log(`${dir}: ${id} tokens, ${merges.length} merges, ${alphabet.length} characters`);
}

// Texts: the seeded corpus (prose, code, emoji, whitespace runs, invalid UTF-8) with Gemma's special tokens and
// the cases a SentencePiece pipeline makes interesting spliced in.
const EXTRA = ['<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n', '<|turn>user\nWhat?<turn|>', '<bos>', '<eos>',
  '<unused0>', '<table><h1>', ' magic word', '  magic word  ', 'magic word', '<stripme>', ' x <stripme>  y', '<0x41>', SP, SP + SP + 'a',
  '\t\tindent', '\n\n\n\n', '   leading', 'trailing   ', '🫩🥲🩵', '🗽⃢⃢🗿', '\u{10FFFD}', '\u0000', 'a\u00a0b', '<start_of_turn', '<<eos>>',
  '<|image|><|image|>', '\r\n\r\n', ' ', '', '日本語 テキスト', 'x'.repeat(300)];
function texts(seed, mb) {
  const base = gen(seed, mb * 1e6);
  const out = EXTRA.map((s) => Buffer.from(s, 'utf8'));
  base.forEach((b, i) => out.push(i % 3 ? b : Buffer.concat([Buffer.from(EXTRA[i % EXTRA.length]), b, Buffer.from(EXTRA[(i * 7) % EXTRA.length])])));
  return out;
}

function u32(n) { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; }
function i32s(ids) { const b = Buffer.alloc(4 * ids.length); ids.forEach((v, k) => b.writeInt32LE(v, 4 * k)); return b; }

function rng(seed) {   // mulberry32, as corpus.js
  let a = seed >>> 0;
  return () => { a = (a + 0x6d2b79f5) >>> 0; let t = a; t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}

async function run(outdir, name, json, list) {
  const { Tokenizer } = require('tokenizers');
  const file = path.join(outdir, name + '.json');
  fs.writeFileSync(file, JSON.stringify(json));
  const tok = Tokenizer.fromFile(file);
  const enc = [], dec = [], encoded = [];
  for (let i = 0; i < list.length; i += 256) {
    const batch = list.slice(i, i + 256), strs = batch.map((b) => b.toString('utf8'));
    const encs = await tok.encodeBatch(strs);
    batch.forEach((raw, j) => {
      const ids = encs[j].getIds();
      encoded.push(ids);
      enc.push(u32(raw.length), raw, u32(0), u32(ids.length), i32s(ids));
    });
  }
  // Decode cases: encodings (kept and skipping specials), and random ids with byte tokens that make valid
  // characters split over several tokens and invalid runs, special tokens and unknown ids mixed in.
  const V = tok.getVocabSize(true) + 2, r = rng(77), cases = [];
  encoded.forEach((ids, i) => { if (i % 5 === 0) cases.push([0, ids], [1, ids]); });
  const byte = (b) => tok.tokenToId('<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>');
  const emoji = [0xf0, 0x9f, 0xa5, 0xb2], euro = [0xe2, 0x82, 0xac];
  for (let c = 0; c < 3000; c++) {
    const ids = [], n = 1 + Math.floor(r() * 30);
    while (ids.length < n) {
      const u = r();
      if (u < 0.15) ids.push(...emoji.slice(0, 1 + Math.floor(r() * 4)).map(byte));
      else if (u < 0.25) ids.push(...euro.map(byte));
      else if (u < 0.32) ids.push(byte(Math.floor(r() * 256)));
      else if (u < 0.42) ids.push(Math.floor(r() * SPECIALS.length));
      else ids.push(Math.floor(r() * V));
    }
    cases.push([c & 1, ids.filter((x) => x != null)]);
  }
  for (const [skip, ids] of cases) {
    const s = Buffer.from(await tok.decode(ids, skip === 1), 'utf8');
    dec.push(u32(skip), u32(ids.length), i32s(ids), u32(s.length), s);
  }
  fs.writeFileSync(path.join(outdir, name + '.bin'), Buffer.concat(enc));
  fs.writeFileSync(path.join(outdir, name + '.dec.bin'), Buffer.concat(dec));
  console.log(`${name}: ${list.length} texts, ${cases.length} decodes`);
}

function variants(base) {
  const v = { gemma: base };
  const g3 = JSON.parse(JSON.stringify(base));   // Gemma 3's files: no pre-tokeniser, merges as "a b" strings
  g3.pre_tokenizer = null;
  g3.model.merges = g3.model.merges.map((m) => m.join(' '));
  v.gemma3style = g3;
  // Without some lead bytes of 3- and 4-byte characters: those characters need <unk>. The tokens are renamed, not
  // deleted: tokenizers numbers added tokens from the vocabulary's size, whatever id the file gives them.
  const unk = JSON.parse(JSON.stringify(base));
  for (const b of ['E2', 'E6', 'F0']) { const k = '<0x' + b + '>'; unk.model.vocab['<0x' + b + ' unused>'] = unk.model.vocab[k]; delete unk.model.vocab[k]; }
  v.gemma_unk = unk;
  const nofuse = JSON.parse(JSON.stringify(unk));
  nofuse.model.fuse_unk = false;
  v.gemma_unk_nofuse = nofuse;
  // Llama-2 / Mistral style: Prepend U+2581, no pre-tokeniser, the decoder strips the leading space.
  const l2 = JSON.parse(JSON.stringify(base));
  l2.normalizer = { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: SP }, { type: 'Replace', pattern: { String: ' ' }, content: SP }] };
  l2.pre_tokenizer = null;
  l2.decoder.decoders.push({ type: 'Strip', content: ' ', start: 1, stop: 0 });
  v.llama2style = l2;
  return v;
}

(async () => {
  if (process.argv[2] === '--make') { make(process.argv[3]); return; }
  const fixture = process.argv[2], outdir = process.argv[3];
  fs.mkdirSync(outdir, { recursive: true });
  const base = JSON.parse(fs.readFileSync(path.join(fixture, 'tokenizer.json'), 'utf8'));
  const list = texts(20250501, 0.3), small = list.filter((_, i) => i < 40 || i % 4 === 0);
  for (const [name, json] of Object.entries(variants(base))) await run(outdir, name, json, name === 'gemma' ? list : small);
})().catch((e) => { console.error(e); process.exit(1); });
