// Encode throughput of Hugging Face tokenizers (npm, Rust core) on one text file, for comparison
// with `blockspec tokenize --bench`.   node tests/node/bench.js TOKENIZER_DIR FILE [SECONDS]
'use strict';
const fs = require('fs'), path = require('path');
const { Tokenizer } = require('tokenizers');
const [dir, file, secs] = [process.argv[2], process.argv[3], parseFloat(process.argv[4] || '3')];
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const text = fs.readFileSync(file, 'utf8'), bytes = Buffer.byteLength(text);
(async () => {
  await tok.encode(text);   // warm-up
  let reps = 0, ntok = 0;
  const t0 = process.hrtime.bigint();
  let el = 0;
  do { const e = await tok.encode(text); ntok = e.getIds().length; reps++; el = Number(process.hrtime.bigint() - t0) / 1e9; } while (el < secs);
  console.log(`bytes=${bytes} tokens=${ntok} reps=${reps} seconds=${el.toFixed(3)} MB/s=${(bytes * reps / el / 1e6).toFixed(2)}`);
})();
