// A bounded, self-stopping load on `blockspec serve`: CLIENTS concurrent clients for SECONDS, each sending
// requests back to back (completions or chat, streamed or not, greedy or seeded sampling, 4-96 tokens)
// and cancelling a fraction mid-answer by closing the connection. Checks every answer that was not
// cancelled (HTTP 200, well-formed JSON or SSE ending in [DONE], the usage count), and samples the
// server's resident memory (PID's /proc status) to see that it stays flat. Streamed answers give the
// time to first text and the gaps between text events (as a client sees them: data events, which may
// carry several tokens), printed as percentiles.
//   node tests/node/serve_load.js URL CLIENTS SECONDS PID [CANCEL_FRACTION]
// Prints one JSON summary line; exits 1 on any error or if memory grew more than 25% (+16 MiB) between
// the sample after the first quarter and the last.
const http = require('http');
const fs = require('fs');

const [url, clients, seconds, pid, cancelArg] = process.argv.slice(2);
const base = new URL(url);
const cancelFraction = cancelArg === undefined ? 0.15 : Number(cancelArg);
const deadline = Date.now() + Number(seconds) * 1000;
const prompts = ['static int', 'It is a truth universally acknowledged', 'In the beginning', '#include <linux/', 'The package'];
const stats = { ok: 0, streamed: 0, cancelled: 0, errors: 0, tokens: 0, first_error: null };
const ttft = [], itl = [];   // seconds, streamed answers: to the first text, and between text events
const rss = [];
let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };

function rssKiB() {
  try { return Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]); } catch { return -1; }
}

function fail(msg) { stats.errors++; if (!stats.first_error) stats.first_error = msg; }

function one() {
  return new Promise((resolve) => {
    const chat = rand() < 0.4, stream = rand() < 0.5, maxTokens = 4 + Math.floor(rand() * 92);
    const body = { max_tokens: maxTokens, ignore_eos: true, stream };
    if (rand() < 0.5) body.temperature = 0; else { body.temperature = 0.8; body.seed = Math.floor(rand() * 1000); }
    const p = prompts[Math.floor(rand() * prompts.length)];
    if (chat) body.messages = [{ role: 'user', content: p }]; else body.prompt = p;
    if (stream) body.stream_options = { include_usage: true };
    const data = JSON.stringify(body);
    const t0 = performance.now();
    const cancelAfter = rand() < cancelFraction ? Math.floor(rand() * 150) : -1;
    const req = http.request({ host: base.hostname, port: base.port, method: 'POST', path: chat ? '/v1/chat/completions' : '/v1/completions',
                               headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let text = '', last = 0, seen = 0;
      res.setEncoding('utf8');
      res.on('data', (c) => {
        text += c;
        if (!stream) return;
        const n = (text.match(/"(text|content)":"[^"]/g) || []).length;   // events with text so far
        if (n > seen) {
          const now = performance.now();
          if (seen === 0) ttft.push((now - t0) / 1000); else itl.push((now - last) / 1000);
          last = now; seen = n;
        }
      });
      res.on('end', () => {
        if (res.statusCode !== 200) { fail(`HTTP ${res.statusCode}: ${text.slice(0, 300)}`); return resolve(); }
        try {
          let usage = null;
          if (stream) {
            if (!text.endsWith('data: [DONE]\n\n')) throw new Error('stream without [DONE]');
            for (const ev of text.split('\n\n')) if (ev.startsWith('data: {')) { const j = JSON.parse(ev.slice(6)); if (j.usage) usage = j.usage; }
            stats.streamed++;
          } else usage = JSON.parse(text).usage;
          if (!usage || usage.completion_tokens !== maxTokens) throw new Error(`usage ${JSON.stringify(usage)} for max_tokens ${maxTokens}`);
          stats.tokens += usage.completion_tokens;
          stats.ok++;
        } catch (e) { fail(`${e.message}: ${text.slice(0, 300)}`); }
        resolve();
      });
      res.on('error', () => resolve());
    });
    req.on('error', (e) => { if (cancelAfter < 0) fail(`request error: ${e.message}`); resolve(); });
    if (cancelAfter >= 0) setTimeout(() => { stats.cancelled++; req.destroy(); resolve(); }, cancelAfter);
    req.end(data);
  });
}

async function client() { while (Date.now() < deadline) await one(); }

async function main() {
  const t0 = Date.now();
  const sampler = setInterval(() => rss.push(rssKiB()), 1000);
  rss.push(rssKiB());
  await Promise.all(Array.from({ length: Number(clients) }, client));
  clearInterval(sampler);
  rss.push(rssKiB());
  const q = rss[Math.floor(rss.length / 4)], last = rss[rss.length - 1];
  const grew = q > 0 && last > q * 1.25 + 16384;
  const pct = (a, q) => { if (!a.length) return null; const b = [...a].sort((x, y) => x - y); return +b[Math.min(b.length - 1, Math.floor(q * b.length))].toFixed(4); };
  const out = { ...stats, ttft_s: { p50: pct(ttft, 0.5), p90: pct(ttft, 0.9), p99: pct(ttft, 0.99) },
                itl_s: { p50: pct(itl, 0.5), p90: pct(itl, 0.9), p99: pct(itl, 0.99) }, seconds: (Date.now() - t0) / 1000, clients: Number(clients), rss_kib_start: rss[0], rss_kib_quarter: q,
                rss_kib_end: last, rss_kib_max: Math.max(...rss), memory_flat: !grew };
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(stats.errors || grew || stats.ok === 0 ? 1 : 0);
}
main();
