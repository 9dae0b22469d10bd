// Text helpers of the tokenizer: UTF-8 checking, the GPT-2 byte/character table, regex compiling.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "io/tokenizer_internal.h"

// Returns the length of the valid character at s, or minus the length of the maximal ill-formed
// subpart (Unicode's "maximal subpart" rule, which WHATWG decoders and Node follow): that many
// bytes become one U+FFFD.
int bs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int need; unsigned lo = 0x80, hi = 0xbf; uint32_t v;
    if (c >= 0xc2 && c <= 0xdf) { need = 1; v = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { need = 2; v = c & 0x0f; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 3; v = c & 0x07; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n || s[i] < lo || s[i] > hi) return -i;
        v = (v << 6) | (s[i] & 0x3f);
        lo = 0x80; hi = 0xbf;
    }
    *cp = v;
    return need + 1;
}

int bs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (!n) return 0;
    int k = bs_utf8_step(s, n, cp);
    return k > 0 ? k : 0;
}

int bs_utf8_encode(uint32_t cp, char o[4]) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) { o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f)); return 3; }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t bs_utf8_sanitize(const char *in, size_t n, char **out) {
    const unsigned char *s = (const unsigned char *)in;
    *out = NULL;
    size_t i = 0;
    uint32_t cp;
    // Fast scan: most text is valid, and then no copy is made.
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int k = bs_utf8_step(s + i, n - i, &cp);
        if (k < 0) break;
        i += k;
    }
    if (i == n) return n;
    char *o = malloc(3 * n + 1);   // each bad byte becomes at most 3 bytes
    if (!o) return 0;
    memcpy(o, in, i);
    size_t m = i;
    while (i < n) {
        int k = bs_utf8_step(s + i, n - i, &cp);
        if (k > 0) { memcpy(o + m, s + i, k); m += k; i += k; }
        else { memcpy(o + m, "\xef\xbf\xbd", 3); m += 3; i += -k; }
    }
    o[m] = 0;
    *out = o;
    return m;
}

// GPT-2's table: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 upwards.
static uint32_t byte_cp[256];
static int16_t cp_byte[324];
static pthread_once_t bytes_once = PTHREAD_ONCE_INIT;
static void bytes_init(void) {
    int n = 0;
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        byte_cp[b] = printable ? (uint32_t)b : 256 + n++;
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}
void bs_bytelevel_char(unsigned char b, char out[4], int *len) {
    pthread_once(&bytes_once, bytes_init);
    *len = bs_utf8_encode(byte_cp[b], out);
}
int bs_bytelevel_byte(uint32_t cp) {
    pthread_once(&bytes_once, bytes_init);
    return cp < 324 ? cp_byte[cp] : -1;
}

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static void bs_onig_init_once(void) {
    OnigEncoding enc[1] = { ONIG_ENCODING_UTF8 };
    onig_initialize(enc, 1);
}

static int compile(regex_t **re, const char *pat, size_t len, bs_err *err) {
    OnigErrorInfo info;
    int r = onig_new(re, (const UChar *)pat, (const UChar *)pat + len, ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
    if (r != ONIG_NORMAL) {
        UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &info);
        *re = NULL;
        return bs_fail(err, "regex /%.*s/ does not compile: %s", (int)(len > 200 ? 200 : len), pat, (char *)msg);
    }
    return 0;
}

const char *bs_gpt2_regex(void) {
    return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
}
const char *bs_qwen2_regex(void) {
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
}

// The patterns blockspec itself writes or implies (GPT-2's, which ByteLevel's use_regex adds, and Qwen2/3's,
// which tokenizer-train writes) are compiled once per process and shared by every tokenizer and training run
// that uses them: a search only reads a compiled regex. Loading the Qwen3 tokenizer or a trained one then
// compiles nothing. This matters under ASan, where Oniguruma's compile takes ~0.5 ms (its memmove calls
// go through ASan's byte-wise copy): it was a sixth of the bpe_train fuzz harness's time, loading included.
// Any other pattern is compiled for its tokenizer and freed with it.
//
// Every Oniguruma search allocates, fills and frees a ~5 KB backtracking stack (it copies its alloca'd stack
// to the heap at the end of each match attempt), which cost more than the matching itself: 5 times as much
// under ASan (the tokenize and bpe_train fuzz harnesses spent a fifth of their time there) and half of a
// plain search. So each built-in pattern P also has a run form, (P)(P)?(P)?... with BS_REGEX_RUN groups,
// which finds up to that many consecutive matches in one search: group 1 is the leftmost match, exactly
// what P's own search finds, and group k+1, when it matched, is P's own match at the end of group k, which
// is what the next search from there would find (P holds no captures, anchors or look-behind, so its
// matches do not depend on where the search began). Both are written once, under the lock, and never again.
static const char *(*const known_pattern[2])(void) = { bs_gpt2_regex, bs_qwen2_regex };
static regex_t *known_re[2], *known_run[2];
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;

static int known_index(const char *pat, size_t len) {
    for (int k = 0; k < 2; k++) {
        const char *kp = known_pattern[k]();
        if (strlen(kp) == len && !memcmp(kp, pat, len)) return k;
    }
    return -1;
}

// The run form of built-in pattern k, or NULL (out of memory: searches then go one match at a time).
static regex_t *compile_run_form(int k) {
    const char *p = known_pattern[k]();
    size_t pl = strlen(p), len = 0;
    char *pat = malloc(BS_REGEX_RUN * (pl + 3) + 1);
    if (!pat) return NULL;
    for (int g = 0; g < BS_REGEX_RUN; g++) len += (size_t)sprintf(pat + len, g ? "(%s)?" : "(%s)", p);
    regex_t *run = NULL;
    bs_err err;
    if (compile(&run, pat, len, &err) == 0 && onig_number_of_captures(run) != BS_REGEX_RUN) { onig_free(run); run = NULL; }
    free(pat);
    return run;
}

int bs_regex_compile(regex_t **re, const char *pat, size_t len, bs_err *err) {
    pthread_once(&onig_once, bs_onig_init_once);
    int k = known_index(pat, len);
    if (k < 0) return compile(re, pat, len, err);
    pthread_mutex_lock(&known_lock);
    int rc = 0;
    if (!known_re[k] && (rc = compile(&known_re[k], pat, len, err)) == 0) known_run[k] = compile_run_form(k);
    *re = known_re[k];
    pthread_mutex_unlock(&known_lock);
    return rc;
}

regex_t *bs_regex_run_form(const regex_t *re) {
    pthread_mutex_lock(&known_lock);
    regex_t *run = !re ? NULL : re == known_re[0] ? known_run[0] : re == known_re[1] ? known_run[1] : NULL;
    pthread_mutex_unlock(&known_lock);
    return run;
}

void bs_regex_free(regex_t *re) {
    pthread_mutex_lock(&known_lock);
    int shared = re && (re == known_re[0] || re == known_re[1]);
    pthread_mutex_unlock(&known_lock);
    if (re && !shared) onig_free(re);
}

void bs_regex_ws_free(bs_regex_ws *ws) {
    if (ws->region) onig_region_free(ws->region, 1);
    if (ws->mp) onig_free_match_param(ws->mp);
    memset(ws, 0, sizeof *ws);
}

// Oniguruma counts backtracking steps and gives up at a fixed limit (10M by default), which a greedy
// pattern such as Qwen's \s+(?!\S) reaches on a whitespace run of ~10 MB: one step per character. The
// limit is raised in proportion to the text searched, so any run tokenises while a pathological
// pattern still stops after a bounded amount of work.
#define BS_REGEX_STEPS_PER_BYTE 16
#define BS_REGEX_MIN_STEPS 10000000UL

int bs_regex_search(regex_t *re, regex_t *run, bs_regex_ws *ws, const char *s, size_t n, size_t at, bs_span *m, bs_err *err) {
    if (!ws->region && !(ws->region = onig_region_new())) return bs_fail(err, "out of memory");
    if (!ws->mp) {
        if (!(ws->mp = onig_new_match_param())) return bs_fail(err, "out of memory");
        onig_initialize_match_param(ws->mp);
    }
    unsigned long limit = n < (BS_REGEX_MIN_STEPS / BS_REGEX_STEPS_PER_BYTE) ? BS_REGEX_MIN_STEPS : (unsigned long)n * BS_REGEX_STEPS_PER_BYTE;
    onig_set_retry_limit_in_match_of_match_param(ws->mp, limit);
    const UChar *str = (const UChar *)s, *end = str + n;
    OnigRegion *rg = ws->region;
    if (run) {
        int r = onig_search_with_param(run, str, end, str + at, end, rg, ONIG_OPTION_NONE, ws->mp);
        if (r == ONIG_MISMATCH) return 0;
        if (r >= 0) {
            int k = 0;
            m[k++] = (bs_span){ (size_t)rg->beg[1], (size_t)(rg->end[1] - rg->beg[1]) };
            // A group that did not match ends the run (the next search looks further on), and so does an empty
            // one, which the caller treats as a search result of its own (P's never are).
            for (int g = 2; g <= BS_REGEX_RUN && rg->beg[g] >= 0 && rg->end[g] > rg->beg[g]; g++)
                m[k++] = (bs_span){ (size_t)rg->beg[g], (size_t)(rg->end[g] - rg->beg[g]) };
            return k;
        }
        // An error (the step limit, over several matches at once): P's own search gives what it always gave.
    }
    int r = onig_search_with_param(re, str, end, str + at, end, rg, ONIG_OPTION_NONE, ws->mp);
    if (r == ONIG_MISMATCH) return 0;
    if (r < 0) {
        UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r);
        return bs_fail(err, "the pre-tokeniser's regex failed %zu bytes into a %zu-byte piece of the text: %s", at, n, (char *)msg);
    }
    m[0] = (bs_span){ (size_t)rg->beg[0], (size_t)(rg->end[0] - rg->beg[0]) };
    return 1;
}

int bs_ids_push(bs_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 256;
        void *p = realloc(a->v, c * sizeof *a->v);
        if (!p) return -1;
        a->v = p; a->cap = c;
    }
    a->v[a->n++] = id;
    return 0;
}
int bs_ids_append(bs_ids *a, const int32_t *v, size_t n) {
    if (!n) return 0;
    if (a->n + n > a->cap) {
        size_t c = a->cap ? a->cap : 256;
        while (c < a->n + n) c *= 2;
        void *p = realloc(a->v, c * sizeof *a->v);
        if (!p) return -1;
        a->v = p; a->cap = c;
    }
    memcpy(a->v + a->n, v, n * sizeof *v);
    a->n += n;
    return 0;
}
int bs_spans_push(bs_spans *a, size_t off, size_t len) {
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 256;
        void *p = realloc(a->v, c * sizeof *a->v);
        if (!p) return -1;
        a->v = p; a->cap = c;
    }
    a->v[a->n++] = (bs_span){ off, len };
    return 0;
}
