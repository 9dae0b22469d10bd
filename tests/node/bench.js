// Encode throughput of Hugging Face tokenizers (npm, Rust core) on one text file, for comparison
// with `blockspec tokenize --bench`.   node tests/node/bench.js TOKENIZER_DIR FILE [SECONDS]
'use strict';
const fs = require('fs'), path = require('path');
const { Tokenizer } = require('tokenizers');
const [dir, file, secs, chunk] = [process.argv[2], process.argv[3], parseFloat(process.argv[4] || '3'), parseInt(process.argv[5] || '0')];
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
// Same cut points as `blockspec tokenize --bench --chunk N`: every N bytes, moved to a character start.
const raw = fs.readFileSync(file), texts = [];
for (let off = 0; off < raw.length;) {
  let end = chunk && off + chunk < raw.length ? off + chunk : raw.length;
  while (end < raw.length && (raw[end] & 0xc0) === 0x80) end++;
  texts.push(raw.subarray(off, end).toString('utf8')); off = end;
}
const bytes = raw.length;
(async () => {
  await tok.encode(texts[0]);   // warm-up
  let reps = 0, ntok = 0;
  const t0 = process.hrtime.bigint();
  let el = 0;
  do { ntok = 0; for (const t of texts) { const e = await tok.encode(t); ntok += e.getIds().length; } reps++; el = Number(process.hrtime.bigint() - t0) / 1e9; } while (el < secs);
  console.log(`bytes=${bytes} tokens=${ntok} reps=${reps} seconds=${el.toFixed(3)} MB/s=${(bytes * reps / el / 1e6).toFixed(2)}`);
})();
