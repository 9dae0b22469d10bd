// Chat prompts: renders messages with the model's chat template. Not a Jinja engine: the template of
// tokenizer_config.json is recognised (ChatML; Qwen3's with <think> handling) and rendered natively,
// exactly as the official template renders it (checked against @huggingface/jinja in the tests).
#pragma once
#include <stddef.h>
#include "util/err.h"
#include "io/tokenizer.h"

typedef enum { BS_CHAT_AUTO = 0, BS_CHAT_QWEN3, BS_CHAT_CHATML } bs_chat_kind;

typedef struct {
    const char *role;               // "system", "user", "assistant" or "tool"
    const char *content;
    const char *reasoning_content;  // assistant only, optional (else taken from <think>...</think> in content)
} bs_chat_msg;

typedef struct {
    bs_chat_kind kind;              // AUTO: detected from the tokenizer's chat_template
    int add_generation_prompt;
    int enable_thinking;            // Qwen3: 0 adds the empty <think></think> block, as enable_thinking=false does
} bs_chat_opts;

// Detects the template family; an unknown template is an error saying what to pass instead.
int bs_chat_detect(const char *chat_template, bs_chat_kind *kind, bs_err *err);
// Parses "qwen3" / "chatml" (the --chat-template values).
int bs_chat_kind_parse(const char *name, bs_chat_kind *kind, bs_err *err);
// Renders to a malloc'ed NUL-terminated string. tok may be NULL when opts->kind is not AUTO.
int bs_chat_render(const bs_tokenizer *tok, const bs_chat_msg *msgs, size_t n, const bs_chat_opts *opts,
                   char **out, bs_err *err);
