// The official OpenAI client (npm `openai`) against `blockspec serve`: tests/test_server.c starts the
// server, runs this with its base URL, and compares what it prints with `blockspec generate`.
//   node tests/node/openai_client.js http://127.0.0.1:PORT/v1 MODEL
// Prints one JSON object: the texts of a completion and a chat completion, each streamed and not, and the
// listed model ids.
const OpenAI = require('openai');

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const out = {};
  out.models = (await client.models.list()).data.map((m) => m.id);
  const common = { model, max_tokens: 32, temperature: 0, ignore_eos: true };
  const c = await client.completions.create({ ...common, prompt: 'static int' });
  out.completion = c.choices[0].text;
  out.completion_finish = c.choices[0].finish_reason;
  out.completion_usage = c.usage;
  let s = '';
  for await (const chunk of await client.completions.create({ ...common, prompt: 'static int', stream: true })) s += chunk.choices[0]?.text ?? '';
  out.completion_stream = s;
  const messages = [{ role: 'user', content: 'What is the Debian package vim?' }];
  const ch = await client.chat.completions.create({ ...common, messages });
  out.chat = ch.choices[0].message.content;
  out.chat_role = ch.choices[0].message.role;
  s = '';
  let usage = null;
  const stream = await client.chat.completions.create({ ...common, messages, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    s += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  out.chat_stream = s;
  out.chat_stream_usage = usage;
  // An error comes back as the client's typed error with the server's message.
  try {
    await client.completions.create({ ...common, prompt: 'x', max_tokens: -1 });
    out.error = 'none';
  } catch (e) {
    out.error = `${e.status} ${e.message}`;
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => { console.error(`openai_client: ${e.stack || e}`); process.exit(1); });
