// Internal layout of bs_tokenizer, shared by the tokenizer_*.c files (one job each).
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <oniguruma.h>
#include "io/tokenizer.h"
#include "io/tok_map.h"

enum { BS_NORM_NFC = 1, BS_NORM_NFD, BS_NORM_NFKC, BS_NORM_NFKD, BS_NORM_LOWERCASE, BS_NORM_REPLACE, BS_NORM_PREPEND };
// Decoder steps (a Sequence flattened). Only the orders that real files use are accepted (tokenizer_load.c,
// load_decoder): per-token string steps first, then ByteFallback / ByteLevel, Fuse, and a Strip of the whole text.
enum { BS_DEC_REPLACE = 1, BS_DEC_STRIP, BS_DEC_BYTEFALLBACK, BS_DEC_BYTELEVEL, BS_DEC_FUSE };
enum { BS_PRE_SPLIT = 1, BS_PRE_BYTELEVEL };
enum { BS_SPLIT_ISOLATED = 1, BS_SPLIT_REMOVED, BS_SPLIT_MERGED_PREV, BS_SPLIT_MERGED_NEXT, BS_SPLIT_CONTIGUOUS };

typedef struct {
    int kind;
    regex_t *re;            // Split pattern, or the GPT-2 regex for ByteLevel(use_regex)
    regex_t *run;           // its run form (bs_regex_run_form), or NULL
    int behavior, invert;   // Split
    int add_prefix_space;   // ByteLevel
} bs_pretok;

// A normaliser step. Replace: every match of re (a literal when re is NULL) becomes content; Prepend: content
// goes before a non-empty text.
typedef struct {
    int kind;
    regex_t *re, *run;
    char *pattern; size_t pattern_len;   // Replace with a String pattern (re NULL)
    char *content; size_t content_len;
} bs_norm_step;

// A per-token decoder step (Replace or a Strip before Fuse), applied to every token's text once, at load.
typedef struct {
    int kind;
    regex_t *re, *run;                   // Replace with a Regex (or empty String) pattern
    char *pattern; size_t pattern_len;   // Replace with a String pattern (re NULL)
    char *content; size_t content_len;   // Replace: the replacement; Strip: the character (UTF-8)
    int start, stop;                     // Strip: how many leading / trailing copies of it to remove
} bs_dec_step;

typedef struct {
    char *content; size_t len;
    char *match; size_t match_len;   // what is matched: content, or its normalised form for normalized=true
    int32_t id;
    unsigned special : 1, lstrip : 1, rstrip : 1, normalized : 1, single_word : 1;
} bs_added_token;

// Merge table: key (left id << 32 | right id) -> rank and the merged id.
typedef struct { uint64_t key; int32_t rank, id; } bs_merge_slot;

struct bs_tokenizer {
    // model (BPE)
    bs_tok_map vocab;            // token string -> id (model vocab and added tokens)
    char **id_to_str;            // id -> token string (NUL-terminated), NULL for holes
    uint32_t *id_len;
    uint8_t *id_special;         // 1 for special added tokens
    size_t n_ids;                // largest id + 1
    bs_merge_slot *merges; size_t merge_cap; size_t n_merges;
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;
    char *unk_name;              // model.unk_token when it is not in the vocab: an error once a character needs it
    char *cont_prefix, *eow_suffix;
    int32_t byte_fallback_id[256];

    // normaliser: a list of steps (Sequence flattened)
    bs_norm_step norm[8]; int n_norm;
    // pre-tokenisers (Sequence flattened). byte_level = the last one is ByteLevel, so the model's
    // initial symbols are the mapped bytes (byte_id[b]) and pieces stay raw bytes until then.
    bs_pretok pre[8]; int n_pre;
    int byte_level;
    int32_t byte_id[256];        // id of the ByteLevel character for each byte (-1 if not in vocab)

    // added tokens
    bs_added_token *added; size_t n_added;
    int has_normalized_added;
    uint8_t added_first[2][256];   // [normalized] first bytes that can start an added token
    bs_tok_map added_map[2];       // [normalized] match text -> index into added (the first of equal texts)
    uint32_t *added_lens[2]; size_t n_added_lens[2];   // the distinct match lengths, longest first

    // post-processor (TemplateProcessing single sequence): ids before / after the text
    int32_t *post_pre, *post_post; size_t n_post_pre, n_post_post;

    // decoder: has_decoder = 0 joins the tokens' texts with spaces (what `tokenizers` does without one).
    int has_decoder, dec_byte_level, dec_byte_fallback;
    bs_dec_step dec[8]; int n_dec;       // per-token steps, in order
    char dec_lead[4]; int dec_lead_len, dec_lead_n;   // Strip after Fuse: up to dec_lead_n leading dec_lead off the text
    // Each id's bytes after the per-token steps, ByteLevel's byte mapping and ByteFallback's <0xXX> -> byte, worked
    // out once at load (bs_decode_table_build): dec_bytes[dec_off[id] .. dec_off[id + 1]). dec_is_byte[id] = 1 for
    // a ByteFallback byte token (its run of bytes is checked as a whole). NULL without a decoder.
    char *dec_bytes; size_t *dec_off;
    uint8_t *dec_is_byte;

    // tokenizer_config.json
    int32_t eos_id, bos_id, pad_id;
    char *chat_template;

    const char *src;   // while loading: the file name that messages give (not owned)
};

// tokenizer_bytes.c: the GPT-2 byte <-> unicode character table.
void bs_bytelevel_char(unsigned char b, char out[4], int *len);   // UTF-8 of the char for byte b
int  bs_bytelevel_byte(uint32_t cp);                             // inverse, -1 if not a mapped char

// tokenizer_regex.c
// A compiled regex; the built-in patterns (GPT-2's, Qwen2/3's) are compiled once and shared, so a regex from
// here is released with bs_regex_free, never onig_free.
int  bs_regex_compile(regex_t **re, const char *pattern, size_t len, bs_err *err);
void bs_regex_free(regex_t *re);
const char *bs_gpt2_regex(void);
const char *bs_qwen2_regex(void);   // Qwen2's and Qwen3's Split regex, which tokenizer-train writes
// Searching: bs_regex_search finds the leftmost match of re in s[0..n) at or after byte `at` and writes it to
// m[0], followed, when run is re's run form (bs_regex_run_form: the built-in patterns have one, others NULL),
// by up to BS_REGEX_RUN - 1 matches that each begin where the one before ended: what the searches from those
// ends would find, found by one search. Returns how many (0: no match), or -1 with a message when the search
// fails (its step limit grows with n). ws is reused across calls.
#define BS_REGEX_RUN 8
typedef struct { OnigRegion *region; OnigMatchParam *mp; } bs_regex_ws;
typedef struct { size_t off, len; } bs_span;
regex_t *bs_regex_run_form(const regex_t *re);
int  bs_regex_search(regex_t *re, regex_t *run, bs_regex_ws *ws, const char *s, size_t n, size_t at, bs_span *m, bs_err *err);
void bs_regex_ws_free(bs_regex_ws *ws);

// tokenizer_utf8.c
size_t bs_utf8_sanitize(const char *s, size_t n, char **out);  // returns len; *out NULL if s was valid
int    bs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp); // length of char at s, 0 if invalid
int    bs_utf8_encode(uint32_t cp, char out[4]);
// Length of the valid character at s, or minus the length of its maximal ill-formed subpart.
int    bs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp);

// tokenizer_normalize.c: applies the normaliser; *out NULL when the text is unchanged.
int bs_normalize(const bs_tokenizer *t, const char *s, size_t n, char **out, size_t *out_len, bs_err *err);
// Replaces every match of re in s[0..n) (as the onig crate's find_iter finds them) by content; malloc'ed result.
int bs_regex_replace(regex_t *re, regex_t *run, const char *s, size_t n, const char *content, size_t cl,
                     char **out, size_t *out_len, bs_err *err);
// The same for a literal, non-empty pattern (non-overlapping, left to right); *out NULL when it does not occur.
int bs_replace_literal(const char *pat, size_t pl, const char *content, size_t cl, const char *s, size_t n,
                       char **out, size_t *out_len, bs_err *err);

// tokenizer_decode.c: fills dec_bytes/dec_off (when dec_byte_level), after every token is known.
int bs_decode_table_build(bs_tokenizer *t, bs_err *err);

// Dynamic arrays used by the pipeline.
typedef struct { int32_t *v; size_t n, cap; } bs_ids;
int bs_ids_push(bs_ids *a, int32_t id);
int bs_ids_append(bs_ids *a, const int32_t *v, size_t n);

typedef struct { bs_span *v; size_t n, cap; } bs_spans;
int bs_spans_push(bs_spans *a, size_t off, size_t len);

// Match list of a text, as the onig crate's find_iter yields it (an empty match right after the previous match
// is skipped by one character), the gaps between matches included, tagged m = 1 for a match.
typedef struct { size_t s, e; int m; } bs_mspan;
typedef struct { bs_mspan *v; size_t n, cap; } bs_mspans;
int bs_find_matches(regex_t *re, regex_t *run, bs_regex_ws *rx, const char *s, size_t n, bs_mspans *out, bs_err *err);

// tokenizer_pretok.c: splits s[0..n) into pieces (spans into s or into *scratch for prefix spaces).
typedef struct bs_pretok_out { bs_spans a, b; char *buf; size_t buf_len, buf_cap; bs_regex_ws rx; } bs_pretok_ws;
int  bs_pretokenize(const bs_tokenizer *t, bs_pretok_ws *ws, const char *s, size_t n, bs_err *err);
void bs_pretok_ws_free(bs_pretok_ws *ws);

// tokenizer_bpe.c: the BPE model on one piece; appends its ids.
typedef struct bs_bpe_ws bs_bpe_ws;
bs_bpe_ws *bs_bpe_ws_new(void);
void bs_bpe_ws_free(bs_bpe_ws *w);
int  bs_bpe_piece(const bs_tokenizer *t, bs_bpe_ws *w, const char *s, size_t n, bs_ids *out, bs_err *err);
int  bs_merge_lookup(const bs_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *id);
int  bs_merge_insert(bs_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id, bs_err *err);
