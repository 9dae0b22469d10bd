// libFuzzer harness for chat prompts: template --8<-- message --8<-- message ... The first part is taken as
// a tokenizer's chat_template (family detection); each message part's first byte picks the role and
// the rest is its content (assistant: content, then reasoning after a 0x01 byte). Rendered with every
// template family and option.
#include "fuzz_util.h"
#include "io/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[9]; size_t len[9];
    int n = fuzz_split(data, size, part, len, 9);
    bs_err err;
    char *tpl = fuzz_cstr(part[0], len[0]);
    bs_chat_kind kind;
    if (bs_chat_detect(tpl, &kind, &err) == 0 && kind != BS_CHAT_QWEN3 && kind != BS_CHAT_CHATML) abort();
    static const char *roles[] = { "system", "user", "assistant", "tool", "user", "bogus" };
    bs_chat_msg msgs[8]; char *own[16]; int n_own = 0;
    for (int i = 1; i < n; i++) {
        const uint8_t *p = part[i]; size_t l = len[i];
        const char *role = roles[l ? p[0] % 6 : 1];
        if (l) { p++; l--; }
        const uint8_t *sep = memchr(p, 1, l);
        msgs[i - 1].role = role;
        msgs[i - 1].content = own[n_own++] = fuzz_cstr(p, sep ? (size_t)(sep - p) : l);
        msgs[i - 1].reasoning_content = sep ? (own[n_own++] = fuzz_cstr(sep + 1, l - (size_t)(sep + 1 - p))) : NULL;
    }
    for (int k = 0; k < 8; k++) {
        bs_chat_opts o = { .kind = k & 1 ? BS_CHAT_QWEN3 : BS_CHAT_CHATML, .add_generation_prompt = k >> 1 & 1, .enable_thinking = k >> 2 & 1 };
        char *out;
        if (bs_chat_render(NULL, msgs, (size_t)(n - 1), &o, &out, &err) == 0) free(out);
    }
    for (int i = 0; i < n_own; i++) free(own[i]);
    free(tpl);
    return 0;
}
