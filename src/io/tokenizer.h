// Hugging Face tokenizer.json compatible tokenizer (BPE models: Qwen3, GPT-2, Llama-3 and Gemma style files).
// encode(text) gives exactly the ids that Hugging Face `tokenizers` gives for the same text, and
// decode(ids) gives the text back. See docs/tokenizer.md for the supported components.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "util/err.h"

typedef struct bs_tokenizer bs_tokenizer;

// Token ids must be below the number of tokens tokenizer.json defines plus this many (holes for reserved
// ranges): the id tables are sized by the largest id, so this keeps them proportional to the file.
#define BS_TOK_ID_SLACK 65536

// path_or_dir: a tokenizer.json file, or a folder holding tokenizer.json (and, optionally,
// tokenizer_config.json, which gives the eos token and the chat template).
int  bs_tokenizer_load(bs_tokenizer **out, const char *path_or_dir, bs_err *err);
// Same, from tokenizer.json text already in memory (config_json may be NULL).
int  bs_tokenizer_load_json(bs_tokenizer **out, const char *json, size_t len, const char *config_json, bs_err *err);
void bs_tokenizer_free(bs_tokenizer *t);

// Text to ids, as `tokenizers` encode(text) does by default (special tokens in the text are recognised,
// the post-processor's special tokens are added). Invalid UTF-8 in text is first replaced by U+FFFD
// per maximal subpart (as a browser or Node's Buffer.toString does). *ids is malloc'ed; free() it.
int  bs_tokenizer_encode(const bs_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, bs_err *err);
// add_special = 0 skips the post-processor's template (like encode(text, add_special_tokens=False)).
int  bs_tokenizer_encode_ex(const bs_tokenizer *t, const char *text, size_t len, int add_special,
                            int32_t **ids, size_t *n, bs_err *err);
// Ids to text (NUL-terminated, malloc'ed). skip_special drops special added tokens. Byte sequences
// that are not valid UTF-8 come out as U+FFFD, as `tokenizers` decode does.
int  bs_tokenizer_decode(const bs_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         char **text, size_t *len, bs_err *err);

size_t      bs_tokenizer_vocab_size(const bs_tokenizer *t);   // largest id + 1, added tokens included
int32_t     bs_tokenizer_token_id(const bs_tokenizer *t, const char *token); // -1 if absent
const char *bs_tokenizer_token_str(const bs_tokenizer *t, int32_t id);      // NULL if absent
int         bs_tokenizer_is_special(const bs_tokenizer *t, int32_t id);
int32_t     bs_tokenizer_eos_id(const bs_tokenizer *t);   // from tokenizer_config.json, else -1
int32_t     bs_tokenizer_pad_id(const bs_tokenizer *t);
int32_t     bs_tokenizer_bos_id(const bs_tokenizer *t);
// The chat_template string of tokenizer_config.json, or NULL.
const char *bs_tokenizer_chat_template(const bs_tokenizer *t);

// Streaming decoder: feed ids one at a time as they are generated; it hands back the text that is
// complete so far, holding back the bytes of a UTF-8 character split across tokens until it is whole.
typedef struct bs_detok {
    const bs_tokenizer *tok;
    int skip_special;
    unsigned char pending[8];
    int n_pending;
    int started;     // a token has been emitted (without a decoder the next one is preceded by a space)
    int lead_left;   // leading characters the decoder's Strip still takes off
} bs_detok;
void bs_detok_init(bs_detok *d, const bs_tokenizer *t, int skip_special);
// Appends the newly complete text for id to out (capacity cap, NUL-terminated); returns its length,
// or -1 if cap is too small (64 + the longest token is always enough).
int  bs_detok_push(bs_detok *d, int32_t id, char *out, size_t cap);
// Emits what is still held back (as U+FFFD for an incomplete character).
int  bs_detok_flush(bs_detok *d, char *out, size_t cap);
