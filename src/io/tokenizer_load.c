// Loading tokenizer.json (+ tokenizer_config.json): builds the BPE tables and the pipeline, and
// refuses any component it does not implement, by name, rather than tokenising differently.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "io/tokenizer_internal.h"
#include "io/json.h"

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int jbool(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static int set_id_str(bs_tokenizer *t, int32_t id, const char *s, size_t len, bs_err *err) {
    if (id < 0 || (size_t)id >= t->n_ids) return bs_fail(err, "token id %d out of range", id);
    free(t->id_to_str[id]);
    if (!(t->id_to_str[id] = malloc(len + 1))) return bs_fail(err, "out of memory");
    memcpy(t->id_to_str[id], s, len);
    t->id_to_str[id][len] = 0;
    t->id_len[id] = (uint32_t)len;
    return 0;
}

static int load_model(bs_tokenizer *t, const cJSON *model, const cJSON *added, bs_err *err) {
    if (!cJSON_IsObject(model)) return bs_fail(err, "%s: \"model\" is missing or not an object", t->src);
    const char *type = jstr(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type && strcmp(type, "BPE"))
        return bs_fail(err, "%s: model type \"%s\" is not supported (only BPE models are)", t->src, type);
    if (!type && !merges) return bs_fail(err, "%s: model has no \"type\" and no \"merges\": only BPE models are supported", t->src);
    if (!cJSON_IsObject(vocab)) return bs_fail(err, "%s: model.vocab must be an object of token -> id", t->src);
    if (!cJSON_IsArray(merges)) return bs_fail(err, "%s: model.merges must be an array", t->src);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return bs_fail(err, "%s: BPE dropout (%g) makes encoding random; not supported", t->src, dropout->valuedouble);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    t->byte_fallback = jbool(model, "byte_fallback", 0);
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    const char *cp = jstr(model, "continuing_subword_prefix"), *es = jstr(model, "end_of_word_suffix");
    if (cp && *cp) t->cont_prefix = strdup(cp);
    if (es && *es) t->eow_suffix = strdup(es);

    // Ids: the largest of the vocab and the added tokens sizes the id table, which must stay proportional
    // to the file: an id must be below the number of tokens the file defines plus BS_TOK_ID_SLACK (room
    // for holes such as reserved ranges). One entry with id 2e9 would otherwise cost 2e9 table slots.
    int64_t max_id = -1;
    double id_limit = (double)cJSON_GetArraySize(vocab) + (double)cJSON_GetArraySize(added) + BS_TOK_ID_SLACK;
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, vocab) {
        if (!bs_json_is_int(it, 0, id_limit - 1))
            return bs_fail(err, "%s: model.vocab[\"%s\"] is not a valid id: ids must be integers in [0, %.0f), the number of tokens the file defines + %d",
                           t->src, it->string, id_limit, BS_TOK_ID_SLACK);
        if (it->valuedouble > max_id) max_id = (int64_t)it->valuedouble;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!bs_json_is_int(id, 0, id_limit - 1) || !jstr(it, "content"))
            return bs_fail(err, "%s: added_tokens[%d] needs an integer \"id\" in [0, %.0f) (the number of tokens the file defines + %d) and a string \"content\"",
                           t->src, k, id_limit, BS_TOK_ID_SLACK);
        if (id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
        k++;
    }
    t->n_ids = (size_t)(max_id + 1);
    t->id_to_str = calloc(t->n_ids + 1, sizeof *t->id_to_str);
    t->id_len = calloc(t->n_ids + 1, sizeof *t->id_len);
    t->id_special = calloc(t->n_ids + 1, 1);
    if (!t->id_to_str || !t->id_len || !t->id_special) return bs_fail(err, "out of memory");
    cJSON_ArrayForEach(it, vocab) {
        size_t l = strlen(it->string);
        if (bs_tok_map_put(&t->vocab, it->string, l, it->valueint) || set_id_str(t, it->valueint, it->string, l, err))
            return bs_fail(err, "out of memory");
    }
    const char *unk = jstr(model, "unk_token");
    t->unk_id = unk ? bs_tok_map_get(&t->vocab, unk, strlen(unk)) : -1;
    // tokenizers loads such a file and fails only when a character needs the unknown token; so does encode.
    if (unk && t->unk_id < 0 && !(t->unk_name = strdup(unk))) return bs_fail(err, "out of memory");
    for (int b = 0; b < 256; b++) {
        char name[8]; snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_fallback_id[b] = t->byte_fallback ? bs_tok_map_get(&t->vocab, name, 6) : -1;
    }

    // Merges, in either stored form: "a b" or ["a", "b"]. The rank is the position.
    int32_t rank = 0;
    size_t pl = t->cont_prefix ? strlen(t->cont_prefix) : 0;
    char *buf = NULL; size_t buf_cap = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b; size_t al, bl;
        if (cJSON_IsString(it)) {
            const char *sp = strchr(it->valuestring, ' ');
            if (!sp) { free(buf); return bs_fail(err, "%s: merge %d \"%s\" is not \"left right\"", t->src, rank, it->valuestring); }
            a = it->valuestring; al = (size_t)(sp - a); b = sp + 1; bl = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) && cJSON_IsString(it->child->next)) {
            a = it->child->valuestring; al = strlen(a); b = it->child->next->valuestring; bl = strlen(b);
        } else { free(buf); return bs_fail(err, "%s: merge %d is neither \"a b\" nor [\"a\", \"b\"]", t->src, rank); }
        int32_t ia = bs_tok_map_get(&t->vocab, a, al), ib = bs_tok_map_get(&t->vocab, b, bl);
        const char *bb = b; size_t bbl = bl;
        if (pl && bl >= pl && !memcmp(b, t->cont_prefix, pl)) { bb += pl; bbl -= pl; }
        if (al + bbl + 1 > buf_cap) { buf_cap = 2 * (al + bbl + 1); free(buf); if (!(buf = malloc(buf_cap))) return bs_fail(err, "out of memory"); }
        memcpy(buf, a, al); memcpy(buf + al, bb, bbl);
        int32_t inew = bs_tok_map_get(&t->vocab, buf, al + bbl);
        if (ia < 0 || ib < 0 || inew < 0) {
            int r = bs_fail(err, "%s: merge %d (\"%.*s\" + \"%.*s\") uses a token that is not in the vocab", t->src, rank, (int)al, a, (int)bl, b);
            free(buf); return r;
        }
        if (bs_merge_insert(t, ia, ib, rank, inew, err)) { free(buf); return -1; }
        rank++;
    }
    free(buf);
    return 0;
}

// Escapes a literal Split pattern ({"String": ...}) into a regex.
static char *regex_escape(const char *s) {
    char *o = malloc(2 * strlen(s) + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) { if (strchr("\\^$.|?*+()[]{}-", *s)) *p++ = '\\'; *p++ = *s; }
    *p = 0;
    return o;
}

// The match text of an added token: normalized=true tokens are matched on normalised text, so by their
// normalised form (tokenizers normalises their content too); it is also what decode gives for them.
static int added_match_text(bs_tokenizer *t, bs_added_token *a, bs_err *err) {
    char *norm = NULL; size_t nl = a->len;
    if (a->normalized && t->n_norm > 0 && bs_normalize(t, a->content, a->len, &norm, &nl, err))
        return bs_wrap(err, "%s: added token \"%s\"", t->src, a->content);
    if (!norm && !(norm = strdup(a->content))) return bs_fail(err, "out of memory");
    a->match = norm; a->match_len = nl;
    return 0;
}

// Indexes the added tokens for matching: per set (normalized or not), match text -> first token with it, and
// the distinct lengths longest first, so that the longest match at a position takes one lookup per length.
static int index_added(bs_tokenizer *t, bs_err *err) {
    for (size_t k = 0; k < t->n_added; k++) {
        const bs_added_token *a = &t->added[k];
        int set = a->normalized && t->n_norm > 0;
        if (!a->match_len) continue;   // a token normalised to nothing can never match
        if (bs_tok_map_get(&t->added_map[set], a->match, a->match_len) >= 0) continue;
        if (bs_tok_map_put(&t->added_map[set], a->match, a->match_len, (int32_t)k)) return bs_fail(err, "out of memory");
        t->added_first[set][(unsigned char)a->match[0]] = 1;
        t->has_normalized_added |= set;
        size_t j = 0, *nl = &t->n_added_lens[set];
        uint32_t *L = t->added_lens[set];
        while (j < *nl && L[j] > a->match_len) j++;
        if (j < *nl && L[j] == a->match_len) continue;
        if (!(L = realloc(L, (*nl + 1) * sizeof *L))) return bs_fail(err, "out of memory");
        memmove(L + j + 1, L + j, (*nl - j) * sizeof *L);
        L[j] = (uint32_t)a->match_len;
        t->added_lens[set] = L; (*nl)++;
    }
    return 0;
}

static int load_added(bs_tokenizer *t, const cJSON *added, bs_err *err) {
    int n = cJSON_GetArraySize(added);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return bs_fail(err, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, added) {
        bs_added_token *a = &t->added[t->n_added];
        const char *c = jstr(it, "content");
        a->len = strlen(c);
        if (!a->len) continue;   // an empty token can never match
        if (!(a->content = strdup(c))) return bs_fail(err, "out of memory");
        t->n_added++;   // counted from here, so that bs_tokenizer_free releases what follows
        a->id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        a->special = jbool(it, "special", 0);
        a->lstrip = jbool(it, "lstrip", 0);
        a->rstrip = jbool(it, "rstrip", 0);
        a->normalized = jbool(it, "normalized", !a->special);
        a->single_word = jbool(it, "single_word", 0);
        if (added_match_text(t, a, err)) return -1;
        // As in Hugging Face, a token the model vocab (or an earlier added token) already has keeps
        // that id, whatever id the entry declares.
        int32_t have = bs_tok_map_get(&t->vocab, c, a->len);
        if (have >= 0) a->id = have;
        else if (bs_tok_map_put(&t->vocab, c, a->len, a->id) || set_id_str(t, a->id, c, a->len, err))
            return bs_fail(err, "out of memory");
        t->id_special[a->id] |= a->special;
    }
    return index_added(t, err);
}

// Replace's pattern: {"String": s} or {"Regex": r}. A non-empty String is kept as a literal (re NULL); an empty one
// becomes the empty regex (it matches between characters, as in tokenizers).
static int load_pattern(bs_tokenizer *t, const cJSON *o, const char *what, regex_t **re, regex_t **run,
                        char **lit, size_t *lit_len, bs_err *err) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const char *rx = jstr(pat, "Regex"), *str = jstr(pat, "String");
    if (!rx && !str) return bs_fail(err, "%s: %s needs pattern.String or pattern.Regex (a string)", t->src, what);
    if (str && *str) {
        if (!(*lit = strdup(str))) return bs_fail(err, "out of memory");
        *lit_len = strlen(str);
        return 0;
    }
    char *esc = str ? regex_escape(str) : NULL;
    const char *use = rx ? rx : esc;
    if (!use) return bs_fail(err, "out of memory");
    int rc = bs_regex_compile(re, use, strlen(use), err);
    free(esc);
    if (rc) return bs_wrap(err, "%s: %s pattern", t->src, what);
    *run = bs_regex_run_form(*re);
    return 0;
}

static int load_normalizer(bs_tokenizer *t, const cJSON *n, bs_err *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = jstr(n, "type");
    if (!type) return bs_fail(err, "%s: normalizer has no \"type\"", t->src);
    if (!strcmp(type, "Sequence")) {
        const cJSON *it, *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) return bs_fail(err, "%s: Sequence normalizer needs a \"normalizers\" array", t->src);
        cJSON_ArrayForEach(it, list) if (load_normalizer(t, it, err)) return -1;
        return 0;
    }
    int k = !strcmp(type, "NFC") ? BS_NORM_NFC : !strcmp(type, "NFD") ? BS_NORM_NFD : !strcmp(type, "NFKC") ? BS_NORM_NFKC
          : !strcmp(type, "NFKD") ? BS_NORM_NFKD : !strcmp(type, "Lowercase") ? BS_NORM_LOWERCASE
          : !strcmp(type, "Replace") ? BS_NORM_REPLACE : !strcmp(type, "Prepend") ? BS_NORM_PREPEND : 0;
    if (!k) return bs_fail(err, "%s: normalizer \"%s\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Sequence)", t->src, type);
    if (t->n_norm == 8) return bs_fail(err, "%s: more than 8 normalisers", t->src);
    bs_norm_step *st = &t->norm[t->n_norm];
    memset(st, 0, sizeof *st);
    st->kind = k;
    if (k == BS_NORM_REPLACE || k == BS_NORM_PREPEND) {
        const char *key = k == BS_NORM_REPLACE ? "content" : "prepend", *c = jstr(n, key);
        if (!c) return bs_fail(err, "%s: normalizer %s needs a string \"%s\"", t->src, type, key);
        if (!(st->content = strdup(c))) return bs_fail(err, "out of memory");
        st->content_len = strlen(c);
        t->n_norm++;   // counted now: bs_tokenizer_free releases the step's strings and regex on any error below
        if (k == BS_NORM_REPLACE && load_pattern(t, n, "normalizer Replace", &st->re, &st->run, &st->pattern, &st->pattern_len, err))
            return -1;
        return 0;
    }
    t->n_norm++;
    return 0;
}

static int load_pretok(bs_tokenizer *t, const cJSON *p, bs_err *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) return bs_fail(err, "%s: pre_tokenizer has no \"type\"", t->src);
    if (!strcmp(type, "Sequence")) {
        const cJSON *it, *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return bs_fail(err, "%s: Sequence pre_tokenizer needs a \"pretokenizers\" array", t->src);
        cJSON_ArrayForEach(it, list) if (load_pretok(t, it, err)) return -1;
        return 0;
    }
    if (t->n_pre == 8) return bs_fail(err, "%s: more than 8 pre-tokenisers", t->src);
    if (t->byte_level)
        return bs_fail(err, "%s: pre-tokeniser \"%s\" after ByteLevel is not supported (ByteLevel must come last)", t->src, type);
    bs_pretok *pt = &t->pre[t->n_pre];
    memset(pt, 0, sizeof *pt);
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *rx = jstr(pat, "Regex"), *lit = jstr(pat, "String");
        if (!rx && !lit) return bs_fail(err, "%s: Split pre_tokenizer needs pattern.Regex or pattern.String", t->src);
        // The behaviour is checked before the regex is compiled, so no error path holds a compiled regex.
        const char *b = jstr(p, "behavior");
        pt->behavior = !b ? BS_SPLIT_ISOLATED : !strcmp(b, "Isolated") ? BS_SPLIT_ISOLATED : !strcmp(b, "Removed") ? BS_SPLIT_REMOVED
                     : !strcmp(b, "MergedWithPrevious") ? BS_SPLIT_MERGED_PREV : !strcmp(b, "MergedWithNext") ? BS_SPLIT_MERGED_NEXT
                     : !strcmp(b, "Contiguous") ? BS_SPLIT_CONTIGUOUS : 0;
        if (!pt->behavior) return bs_fail(err, "%s: Split behavior \"%s\" is not known", t->src, b);
        char *esc = lit ? regex_escape(lit) : NULL;
        const char *use = rx ? rx : esc;
        if (!use) return bs_fail(err, "out of memory");
        int rc = bs_regex_compile(&pt->re, use, strlen(use), err);
        free(esc);
        if (rc) return bs_wrap(err, "%s: Split pre_tokenizer", t->src);
        pt->run = bs_regex_run_form(pt->re);
        pt->invert = jbool(p, "invert", 0);
        pt->kind = BS_PRE_SPLIT;
    } else if (!strcmp(type, "ByteLevel")) {
        pt->kind = BS_PRE_BYTELEVEL;
        pt->add_prefix_space = jbool(p, "add_prefix_space", 1);
        if (jbool(p, "use_regex", 1) && bs_regex_compile(&pt->re, bs_gpt2_regex(), strlen(bs_gpt2_regex()), err)) return -1;
        pt->run = bs_regex_run_form(pt->re);
        t->byte_level = 1;
    } else
        return bs_fail(err, "%s: pre_tokenizer \"%s\" is not supported (supported: Split, ByteLevel, Sequence)", t->src, type);
    t->n_pre++;
    return 0;
}

// The ids of special_tokens[name]; each must be a token the vocabulary holds (an id the model never
// defined would otherwise be handed out by encode). NULL with a message on failure.
static int32_t *special_ids(const bs_tokenizer *t, const cJSON *specials, const char *name, size_t *n, bs_err *err) {
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    if (!cJSON_IsArray(ids)) { bs_fail(err, "%s: TemplateProcessing special token \"%s\" has no ids in special_tokens", t->src, name); return NULL; }
    int k = cJSON_GetArraySize(ids);
    int32_t *v = malloc((k ? k : 1) * sizeof *v);
    if (!v) { bs_fail(err, "out of memory"); return NULL; }
    const cJSON *it; *n = 0;
    cJSON_ArrayForEach(it, ids) {
        if (!bs_json_is_int(it, 0, (double)t->n_ids - 1) || !t->id_to_str[(size_t)it->valuedouble]) {
            bs_fail(err, "%s: post_processor.special_tokens[\"%s\"].ids[%zu] is not a token id of this vocabulary", t->src, name, *n);
            free(v); return NULL;
        }
        v[(*n)++] = (int32_t)it->valuedouble;
    }
    return v;
}

static int load_post(bs_tokenizer *t, const cJSON *p, bs_err *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) return bs_fail(err, "%s: post_processor has no \"type\"", t->src);
    if (!strcmp(type, "ByteLevel")) return 0;   // it only adjusts offsets, never ids
    if (!strcmp(type, "Sequence")) {
        const cJSON *it, *list = cJSON_GetObjectItemCaseSensitive(p, "processors");
        cJSON_ArrayForEach(it, list) if (load_post(t, it, err)) return -1;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing"))
        return bs_fail(err, "%s: post_processor \"%s\" is not supported (supported: ByteLevel, TemplateProcessing, Sequence)", t->src, type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single"), *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
    if (!cJSON_IsArray(single)) return bs_fail(err, "%s: TemplateProcessing needs a \"single\" array", t->src);
    int seen_seq = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) { seen_seq = 1; continue; }
        const char *name = jstr(st, "id");
        if (!name) return bs_fail(err, "%s: TemplateProcessing item is neither Sequence nor SpecialToken", t->src);
        size_t n = 0;
        int32_t *v = special_ids(t, specials, name, &n, err);
        if (!v) return -1;
        int32_t **dst = seen_seq ? &t->post_post : &t->post_pre;
        size_t *dn = seen_seq ? &t->n_post_post : &t->n_post_pre;
        int32_t *nv = realloc(*dst, (*dn + n) * sizeof *nv);
        if (!nv) { free(v); return bs_fail(err, "out of memory"); }
        memcpy(nv + *dn, v, n * sizeof *v);
        *dst = nv; *dn += n;
        free(v);
    }
    return 0;
}

// A Strip decoder's fields: one character, and counts that are small non-negative integers.
static int load_strip(bs_tokenizer *t, const cJSON *d, bs_dec_step *st, bs_err *err) {
    const char *c = jstr(d, "content");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(d, "start"), *b = cJSON_GetObjectItemCaseSensitive(d, "stop");
    uint32_t cp;
    if (!c || !*c || bs_utf8_decode((const unsigned char *)c, strlen(c), &cp) != (int)strlen(c) ||
        !bs_json_is_int(a, 0, 1 << 20) || !bs_json_is_int(b, 0, 1 << 20))
        return bs_fail(err, "%s: decoder Strip needs \"content\" (one character) and \"start\", \"stop\" (integers >= 0)", t->src);
    if (!(st->content = strdup(c))) return bs_fail(err, "out of memory");
    st->content_len = strlen(c);
    st->start = a->valueint; st->stop = b->valueint;
    return 0;
}

// The decoder, flattened. What it gives is worked out per token at load (bs_decode_table_build) and then
// concatenated, which is what tokenizers' chain gives when the steps come in the orders real files use:
// per-token Replace / Strip first; then ByteFallback or ByteLevel; Fuse; a Strip of leading characters of the
// whole text (Llama-2, Mistral). Other orders are refused rather than decoded differently.
static int load_decoder(bs_tokenizer *t, const cJSON *d, int *fused, bs_err *err) {
    if (!d || cJSON_IsNull(d)) return 0;
    const char *type = jstr(d, "type");
    if (!type) return bs_fail(err, "%s: decoder has no \"type\"", t->src);
    t->has_decoder = 1;
    if (!strcmp(type, "Sequence")) {
        const cJSON *it, *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (!cJSON_IsArray(list)) return bs_fail(err, "%s: Sequence decoder needs a \"decoders\" array", t->src);
        cJSON_ArrayForEach(it, list) if (load_decoder(t, it, fused, err)) return -1;
        return 0;
    }
    int after_bytes = t->dec_byte_level || t->dec_byte_fallback;
    if (!strcmp(type, "ByteLevel") || !strcmp(type, "ByteFallback")) {
        if (after_bytes || *fused)
            return bs_fail(err, "%s: decoder %s after ByteLevel, ByteFallback or Fuse is not supported", t->src, type);
        if (type[4] == 'L') { t->dec_byte_level = 1; *fused = 1; }   // ByteLevel hands back one string
        else t->dec_byte_fallback = 1;
        return 0;
    }
    if (!strcmp(type, "Fuse")) { *fused = 1; return 0; }
    if (strcmp(type, "Replace") && strcmp(type, "Strip"))
        return bs_fail(err, "%s: decoder \"%s\" is not supported (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, Sequence)", t->src, type);
    if (type[0] == 'S' && *fused) {   // Strip of the whole text: leading characters only (a stream cannot see its end)
        bs_dec_step st = { 0 };
        if (load_strip(t, d, &st, err)) return -1;
        int ok = st.stop == 0 && !t->dec_lead_n;
        if (ok) { memcpy(t->dec_lead, st.content, st.content_len); t->dec_lead_len = (int)st.content_len; t->dec_lead_n = st.start; }
        free(st.content);
        return ok ? 0 : bs_fail(err, "%s: decoder Strip after Fuse must have \"stop\": 0 and come once (trailing characters are not stripped)", t->src);
    }
    if (after_bytes || *fused)
        return bs_fail(err, "%s: decoder %s after ByteFallback or Fuse is not supported (it must come before them, or a Strip after Fuse)", t->src, type);
    if (t->n_dec == 8) return bs_fail(err, "%s: more than 8 decoder steps", t->src);
    bs_dec_step *st = &t->dec[t->n_dec];
    memset(st, 0, sizeof *st);
    st->kind = type[0] == 'R' ? BS_DEC_REPLACE : BS_DEC_STRIP;
    t->n_dec++;   // counted now: bs_tokenizer_free releases what the step holds on any error below
    if (st->kind == BS_DEC_STRIP) return load_strip(t, d, st, err);
    const char *c = jstr(d, "content");
    if (!c) return bs_fail(err, "%s: decoder Replace needs a string \"content\"", t->src);
    if (!(st->content = strdup(c))) return bs_fail(err, "out of memory");
    st->content_len = strlen(c);
    return load_pattern(t, d, "decoder Replace", &st->re, &st->run, &st->pattern, &st->pattern_len, err);
}

static int32_t config_token(const bs_tokenizer *t, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : jstr(v, "content");
    return s ? bs_tok_map_get(&t->vocab, s, strlen(s)) : -1;
}

static int load_config(bs_tokenizer *t, const char *json, const char *name, bs_err *err) {
    cJSON *cfg = bs_json_parse(json, strlen(json), name, err);
    if (!cfg) return -1;
    if (!cJSON_IsObject(cfg)) { cJSON_Delete(cfg); return bs_fail(err, "%s: expected a JSON object at the top level", name); }
    t->eos_id = config_token(t, cfg, "eos_token");
    t->bos_id = config_token(t, cfg, "bos_token");
    t->pad_id = config_token(t, cfg, "pad_token");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *it;
    if (cJSON_IsString(ct)) t->chat_template = strdup(ct->valuestring);
    else if (cJSON_IsArray(ct))   // [{name, template}, ...]: the "default" one
        cJSON_ArrayForEach(it, ct) { const char *nm = jstr(it, "name"), *tp = jstr(it, "template");
            if (nm && tp && !strcmp(nm, "default")) t->chat_template = strdup(tp); }
    cJSON_Delete(cfg);
    return 0;
}

// name and config_name: what messages call the two files (their paths when loaded from disk).
static int load_json_named(bs_tokenizer **out, const char *json, size_t len, const char *name, const char *config_json,
                           const char *config_name, bs_err *err) {
    *out = NULL;
    cJSON *root = bs_json_parse(json, len, name, err);
    if (!root) return -1;
    bs_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { cJSON_Delete(root); return bs_fail(err, "out of memory"); }
    t->src = name;
    t->eos_id = t->bos_id = t->pad_id = t->unk_id = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncation"), *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
    int rc = !cJSON_IsObject(root) ? bs_fail(err, "%s: the top level must be an object", t->src) : 0;
    if (!rc && added && !cJSON_IsArray(added)) rc = bs_fail(err, "%s: \"added_tokens\" must be an array", t->src);
    if (!rc && trunc && !cJSON_IsNull(trunc)) rc = bs_fail(err, "%s: \"truncation\" is set; truncation is not supported (set it to null)", t->src);
    if (!rc && pad && !cJSON_IsNull(pad)) rc = bs_fail(err, "%s: \"padding\" is set; padding is not supported (set it to null)", t->src);
    if (!rc) rc = load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), added, err);
    if (!rc) rc = load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err);
    if (!rc) rc = load_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err);
    if (!rc && added) rc = load_added(t, added, err);
    if (!rc) rc = load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err);
    int fused = 0;
    if (!rc) rc = load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), &fused, err);
    cJSON_Delete(root);
    if (!rc && t->byte_level)
        for (int b = 0; b < 256; b++) { char c[4]; int l; bs_bytelevel_char((unsigned char)b, c, &l); t->byte_id[b] = bs_tok_map_get(&t->vocab, c, l); }
    if (!rc && config_json) rc = load_config(t, config_json, config_name, err);
    if (!rc) rc = bs_decode_table_build(t, err);
    t->src = NULL;   // the name belongs to the caller; it is only used while loading
    if (rc) { bs_tokenizer_free(t); return -1; }
    *out = t;
    return 0;
}

int bs_tokenizer_load_json(bs_tokenizer **out, const char *json, size_t len, const char *config_json, bs_err *err) {
    return load_json_named(out, json, len, "tokenizer.json", config_json, "tokenizer_config.json", err);
}

int bs_tokenizer_load(bs_tokenizer **out, const char *path, bs_err *err) {
    *out = NULL;
    struct stat st;
    if (!path || stat(path, &st)) return bs_fail(err, "tokenizer: %s does not exist", path ? path : "(null)");
    size_t pl = strlen(path);
    char *json_path = malloc(pl + 32), *cfg_path = malloc(pl + 32);
    if (!json_path || !cfg_path) { free(json_path); free(cfg_path); return bs_fail(err, "out of memory"); }
    if (S_ISDIR(st.st_mode)) {
        snprintf(json_path, pl + 32, "%s/tokenizer.json", path);
        snprintf(cfg_path, pl + 32, "%s/tokenizer_config.json", path);
    } else {
        strcpy(json_path, path);
        const char *slash = strrchr(path, '/');
        int dl = slash ? (int)(slash - path) : 1;
        snprintf(cfg_path, pl + 32, "%.*s/tokenizer_config.json", dl, slash ? path : ".");
    }
    size_t len;
    char *json = bs_read_file(json_path, &len, err), *cfg = NULL;
    int rc = -1;
    // tokenizer_config.json is optional, but one that is there and unreadable (or a FIFO) is an error.
    if (json && (stat(cfg_path, &st) || (cfg = bs_read_file(cfg_path, NULL, err))))
        rc = load_json_named(out, json, len, json_path, cfg, cfg_path, err);
    free(json); free(cfg); free(json_path); free(cfg_path);
    return rc;
}

void bs_tokenizer_free(bs_tokenizer *t) {
    if (!t) return;
    bs_tok_map_free(&t->vocab);
    for (size_t i = 0; i < t->n_ids; i++) free(t->id_to_str ? t->id_to_str[i] : NULL);
    free(t->id_to_str); free(t->id_len); free(t->id_special); free(t->merges);
    free(t->dec_bytes); free(t->dec_off); free(t->dec_is_byte);
    free(t->cont_prefix); free(t->eow_suffix); free(t->unk_name);
    for (int i = 0; i < t->n_norm; i++) { bs_regex_free(t->norm[i].re); free(t->norm[i].pattern); free(t->norm[i].content); }
    for (int i = 0; i < t->n_dec; i++) { bs_regex_free(t->dec[i].re); free(t->dec[i].pattern); free(t->dec[i].content); }
    for (int s = 0; s < 2; s++) { bs_tok_map_free(&t->added_map[s]); free(t->added_lens[s]); }
    for (int i = 0; i < t->n_pre; i++) bs_regex_free(t->pre[i].re);
    for (size_t i = 0; i < t->n_added; i++) { free(t->added[i].content); free(t->added[i].match); }
    free(t->added); free(t->post_pre); free(t->post_post); free(t->chat_template);
    free(t);
}
