// Deterministic (seeded) test text for the tokenizer: code, prose in several scripts, emoji and ZWJ
// sequences, combining marks, whitespace runs, CRLF, digits, special tokens mid-text, invalid UTF-8.
// Random code points come only from blocks complete before Unicode 15 (see docs/tokenizer.md).
'use strict';

function rng(seed) {   // mulberry32
  let a = seed >>> 0;
  return () => { a = (a + 0x6d2b79f5) >>> 0; let t = a; t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}

const WORDS = ('the of and to in is you that it he was for on are as with his they I at be this have from or one had by word ' +
  "but not what all were we when your can said there use an each which she do how their if will up other about out many then " +
  "them these so some her would make like him into time has look two more write go see number no way could people my than first " +
  "water been call who oil its now find long down day did get come made may part don't it's we're they've I'm you'll he'd " +
  "TOKENIZER Tokenization HuggingFace transformers speculative decoding lossless QWEN3 naïve café résumé coöperate").split(' ');
const CODE = [
  'int main(int argc, char **argv) {\n    printf("hello %d\\n", argc);\n    return 0;\n}\n',
  'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
  'const f = async (xs) => {\n\tfor (const x of xs) { await g(x?.y ?? 0); }\n};\n// TODO: fix\r\n',
  'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}\n',
  'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("héllo, 世界")\n}\n',
  'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;\n',
  '<!DOCTYPE html>\n<html><body><div class="a b">&nbsp;&lt;tag&gt;</div></body></html>\n',
  '#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo "$f"; done 2>&1 | tee log\n',
  '{"key": [1, 2.5e-3, null, true], "nested": {"a": "\\u00e9"}}\n',
  '    if (x == 1)\n        return;\n\n\n\t\t\n  \n',
];
const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>', '</tool_response>',
  '<|fim_prefix|>', '<|vision_pad|>', '<|im_', '<think', '<|endoftext|', '<<|im_end|>>'];
const SENTENCES = [
  '我们今天去公园散步，天气非常好！', '机器学习是人工智能的一个分支。', '日本語のテキストも正しく処理する必要があります。',
  'カタカナとひらがな、そして漢字。', 'مرحبا بالعالم، هذا نص عربي للاختبار.', 'Привет, мир! Это тест токенизатора.',
  '안녕하세요, 세계! 토크나이저 테스트입니다.', 'नमस्ते दुनिया, यह एक परीक्षण है।', 'สวัสดีชาวโลก นี่คือการทดสอบ',
  'Γειά σου Κόσμε! Αυτό είναι ένα τεστ.', 'שלום עולם, זהו מבחן.', 'Xin chào thế giới, đây là bài kiểm tra.',
];
const EMOJI = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '❤️', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '1️⃣', '🙇‍♀️', '🐻‍❄️'];
const COMBINING = ['e\u0301', 'a\u0308', 'n\u0303', 'o\u0302\u0323', '\u1100\u1161\u11a8', 'A\u030a', 'Z\u0335\u0321', 'i\u0307\u0301', '\u0915\u093c'];
const WS = [' ', '  ', '\t', '\n', '\r\n', '\n\n', '   \n', ' \t ', '\u00a0', '\u3000', '\r', '\u2028', '                ', '\n\n\n\n'];
// Blocks assigned before Unicode 15: [lo, hi].
const BLOCKS = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff],
  [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x20a0, 0x20bf], [0x2190, 0x22ff],
  [0x2500, 0x27bf], [0x3000, 0x30ff], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1d400, 0x1d7ff],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x0300, 0x036f]];

function gen(seed, target) {
  const r = rng(seed), pick = (a) => a[Math.floor(r() * a.length)];
  const out = [];
  let total = 0;
  while (total < target) {
    const parts = [], kind = Math.floor(r() * 10), len = 1 + Math.floor(r() * 40);
    for (let i = 0; i < len; i++) {
      const k = kind < 3 ? Math.floor(r() * 3) : Math.floor(r() * 12);
      switch (k) {
        case 0: parts.push((r() < 0.7 ? ' ' : '') + pick(WORDS) + (r() < 0.1 ? pick(['.', ',', '!', '?', ';', ':', '...', "'s", "'T", '"']) : '')); break;
        case 1: parts.push(pick(CODE)); break;
        case 2: parts.push(pick(SENTENCES)); break;
        case 3: parts.push(pick(EMOJI)); break;
        case 4: parts.push(pick(COMBINING)); break;
        case 5: parts.push(pick(WS)); break;
        case 6: parts.push(String(Math.floor(r() * 1e9)) + (r() < 0.3 ? '.' + Math.floor(r() * 1000) : '')); break;
        case 7: parts.push(pick(SPECIALS)); break;
        case 8: { let s = ''; const n = 1 + Math.floor(r() * 12);
          for (let j = 0; j < n; j++) { const b = pick(BLOCKS); s += String.fromCodePoint(b[0] + Math.floor(r() * (b[1] - b[0] + 1))); }
          parts.push(s); break; }
        case 9: parts.push(' '.repeat(Math.floor(r() * 70)) + pick(['', 'x', '\n', '\t'])); break;
        case 10: parts.push(pick(WORDS).toUpperCase() + pick(["'S", "'LL", "'Ve", "'D", "'m", "'re"])); break;
        default: parts.push(pick(SENTENCES).slice(0, 1 + Math.floor(r() * 10)) + pick(WORDS)); break;
      }
    }
    let s = parts.join('');
    if (kind === 9) s = s.replace(/\n/g, '\r\n');
    let buf = Buffer.from(s, 'utf8');
    if (kind === 8) {   // invalid UTF-8: random bytes spliced in (lone continuation, truncated, overlong, surrogate)
      const bad = [[0x80], [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xff], [0xf4, 0x90, 0x80, 0x80]];
      const at = Math.floor(r() * (buf.length + 1));
      buf = Buffer.concat([buf.subarray(0, at), Buffer.from(pick(bad)), buf.subarray(at)]);
    }
    out.push(buf);
    total += buf.length;
  }
  return out;
}

module.exports = { gen };
