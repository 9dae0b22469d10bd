// Chat template rendering for the ChatML family. Qwen3's template differs from plain ChatML in how
// it treats assistant turns: reasoning after the last user query is kept inside <think> blocks,
// earlier reasoning is dropped, and enable_thinking=false pre-fills an empty think block.
#include <stdlib.h>
#include <string.h>
#include "io/chat.h"
#include "util/sbuf.h"


int bs_chat_kind_parse(const char *name, bs_chat_kind *kind, bs_err *err) {
    if (!strcmp(name, "qwen3")) *kind = BS_CHAT_QWEN3;
    else if (!strcmp(name, "chatml")) *kind = BS_CHAT_CHATML;
    else return bs_fail(err, "unknown chat template \"%s\" (known: qwen3, chatml)", name);
    return 0;
}

int bs_chat_detect(const char *tpl, bs_chat_kind *kind, bs_err *err) {
    if (!tpl) return bs_fail(err, "the tokenizer has no chat_template (tokenizer_config.json missing or without one): pass --chat-template chatml or qwen3");
    // Recognised by what the template emits, not by exact text, so that whitespace or tool-call
    // edits of the official templates are still found.
    int chatml = strstr(tpl, "<|im_start|>") && strstr(tpl, "<|im_end|>");
    int think = strstr(tpl, "<think>") && strstr(tpl, "</think>");
    if (chatml && think && strstr(tpl, "enable_thinking")) { *kind = BS_CHAT_QWEN3; return 0; }
    if (chatml && think) { *kind = BS_CHAT_QWEN3; return 0; }
    if (chatml) { *kind = BS_CHAT_CHATML; return 0; }
    return bs_fail(err, "the model's chat_template is not one blockspec renders (it renders ChatML and Qwen3's): "
                        "pass --chat-template chatml or --chat-template qwen3 to choose one");
}

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static int ends(const char *s, const char *p) { size_t a = strlen(s), b = strlen(p); return a >= b && !strcmp(s + a - b, p); }
// Python str.strip/lstrip/rstrip('\n') on [*s, *s+*n)
static void lstrip_nl(const char **s, size_t *n) { while (*n && **s == '\n') { (*s)++; (*n)--; } }
static void rstrip_nl(const char *s, size_t *n) { (void)s; while (*n && s[*n - 1] == '\n') (*n)--; }

static const char *find_last(const char *s, const char *pat) {
    const char *r = NULL, *p = s;
    while ((p = strstr(p, pat))) { r = p; p++; }
    return r;
}

int bs_chat_render(const bs_tokenizer *tok, const bs_chat_msg *m, size_t n, const bs_chat_opts *o, char **out, bs_err *err) {
    *out = NULL;
    bs_chat_kind kind = o->kind;
    if (kind == BS_CHAT_AUTO && bs_chat_detect(tok ? bs_tokenizer_chat_template(tok) : NULL, &kind, err)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content) return bs_fail(err, "chat message %zu has no role or no content", i);
        const char *r = m[i].role;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return bs_fail(err, "chat message %zu: role \"%s\" is not system, user, assistant or tool", i, r);
    }
    bs_sbuf b = { 0 };
    if (kind == BS_CHAT_CHATML) {
        for (size_t i = 0; i < n; i++) {
            bs_sbuf_puts(&b, "<|im_start|>"); bs_sbuf_puts(&b, m[i].role); bs_sbuf_puts(&b, "\n"); bs_sbuf_puts(&b, m[i].content); bs_sbuf_puts(&b, "<|im_end|>\n");
        }
        if (o->add_generation_prompt) bs_sbuf_puts(&b, "<|im_start|>assistant\n");
    } else {
        if (n && !strcmp(m[0].role, "system")) { bs_sbuf_puts(&b, "<|im_start|>system\n"); bs_sbuf_puts(&b, m[0].content); bs_sbuf_puts(&b, "<|im_end|>\n"); }
        // The last user message that is not a tool response: reasoning after it is shown.
        long last_query = (long)n - 1;
        for (long i = (long)n - 1; i >= 0; i--) {
            const char *c = m[i].content;
            if (!strcmp(m[i].role, "user") && !(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) { last_query = i; break; }
        }
        for (size_t i = 0; i < n; i++) {
            const char *r = m[i].role, *c = m[i].content;
            if (!strcmp(r, "user") || (!strcmp(r, "system") && i > 0)) {
                bs_sbuf_puts(&b, "<|im_start|>"); bs_sbuf_puts(&b, r); bs_sbuf_puts(&b, "\n"); bs_sbuf_puts(&b, c); bs_sbuf_puts(&b, "<|im_end|>\n");
            } else if (!strcmp(r, "assistant")) {
                const char *content = c, *reason = ""; size_t cl = strlen(c), rl = 0;
                if (m[i].reasoning_content) { reason = m[i].reasoning_content; rl = strlen(reason); }
                else if (strstr(c, "</think>")) {
                    // content = split('</think>')[-1].lstrip('\n')
                    const char *last = find_last(c, "</think>") + 8;
                    content = last; cl = strlen(last); lstrip_nl(&content, &cl);
                    // reasoning = split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
                    const char *first_end = strstr(c, "</think>");
                    size_t fl = (size_t)(first_end - c);
                    rstrip_nl(c, &fl);
                    const char *st = c, *p = c;
                    while ((p = memmem(p, fl - (size_t)(p - c), "<think>", 7))) { st = p + 7; p++; }
                    reason = st; rl = fl - (size_t)(st - c);
                    lstrip_nl(&reason, &rl);
                }
                bs_sbuf_puts(&b, "<|im_start|>assistant\n");
                if ((long)i > last_query && (i == n - 1 || rl > 0)) {
                    const char *rs = reason; size_t rsl = rl;
                    lstrip_nl(&rs, &rsl); rstrip_nl(rs, &rsl);
                    bs_sbuf_puts(&b, "<think>\n"); bs_sbuf_put(&b, rs, rsl); bs_sbuf_puts(&b, "\n</think>\n\n");
                    lstrip_nl(&content, &cl);
                }
                bs_sbuf_put(&b, content, cl);
                bs_sbuf_puts(&b, "<|im_end|>\n");
            } else if (!strcmp(r, "system")) {
                // the first system message was written above
            } else {   // tool
                if (i == 0 || strcmp(m[i - 1].role, "tool")) bs_sbuf_puts(&b, "<|im_start|>user");
                bs_sbuf_puts(&b, "\n<tool_response>\n"); bs_sbuf_puts(&b, c); bs_sbuf_puts(&b, "\n</tool_response>");
                if (i == n - 1 || strcmp(m[i + 1].role, "tool")) bs_sbuf_puts(&b, "<|im_end|>\n");
            }
        }
        if (o->add_generation_prompt) {
            bs_sbuf_puts(&b, "<|im_start|>assistant\n");
            if (!o->enable_thinking) bs_sbuf_puts(&b, "<think>\n\n</think>\n\n");
        }
    }
    if (b.oom) { free(b.s); return bs_fail(err, "out of memory rendering the chat"); }
    if (!b.s) { b.s = calloc(1, 1); if (!b.s) return bs_fail(err, "out of memory"); }
    *out = b.s;
    return 0;
}
