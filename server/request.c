// Parsing and validating OpenAI-style request bodies. Strict on purpose: a field of the wrong type, out of
// range, or unknown to us is a 400 naming it, never silently ignored, so a client finds out at once that
// (say) its logprobs or tools were not honoured.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/json.h"
#include "server/request.h"

int srv_fail(srv_error *e, int status, const char *type, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(param, ...) srv_fail(e, 400, "invalid_request_error", param, __VA_ARGS__)

int srv_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) { p++; continue; }
        int len; unsigned cp, min;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (end - p < len) return 0;
        for (int i = 1; i < len; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        p += len;
    }
    return 1;
}

static int is_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

static int get_string(const cJSON *v, const char *param, size_t max, char **out, srv_error *e) {
    if (!cJSON_IsString(v)) return BAD(param, "'%s' must be a string", param);
    size_t n = strlen(v->valuestring);
    if (n > max) return BAD(param, "'%s' is %zu bytes; at most %zu are allowed", param, n, max);
    if (!(*out = strdup(v->valuestring))) return srv_fail(e, 500, "server_error", param, "out of memory");
    return 0;
}

static int get_number(const cJSON *v, const char *param, double lo, double hi, double *out, srv_error *e) {
    if (is_null(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return BAD(param, "'%s' must be a number", param);
    if (v->valuedouble < lo || v->valuedouble > hi) return BAD(param, "'%s' is %g; it must be between %g and %g", param, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *v, const char *param, long lo, long hi, int *out, srv_error *e) {
    if (is_null(v)) return 0;
    if (!cJSON_IsNumber(v)) return BAD(param, "'%s' must be an integer", param);
    if (!bs_json_is_int(v, (double)lo, (double)hi)) return BAD(param, "'%s' is %g; it must be an integer from %ld to %ld", param, v->valuedouble, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *v, const char *param, int *out, srv_error *e) {
    if (is_null(v)) return 0;
    if (!cJSON_IsBool(v)) return BAD(param, "'%s' must be true or false", param);
    *out = cJSON_IsTrue(v);
    return 0;
}

// Options we accept only at their neutral value (clients send them by default): anything else is a 400
// saying it is not supported, rather than an answer that silently ignored it.
static int neutral_only(const cJSON *v, const char *param, srv_error *e) {
    if (is_null(v)) return 0;
    if (cJSON_IsNumber(v) && v->valuedouble == 0 && strcmp(param, "n") && strcmp(param, "best_of")) return 0;
    if (cJSON_IsNumber(v) && v->valuedouble == 1 && (!strcmp(param, "n") || !strcmp(param, "best_of"))) return 0;
    if (cJSON_IsBool(v) && !cJSON_IsTrue(v)) return 0;
    if (cJSON_IsObject(v) && !v->child && !strcmp(param, "logit_bias")) return 0;
    if (!strcmp(param, "n") || !strcmp(param, "best_of")) return srv_fail(e, 400, "invalid_request_error", param, "only '%s': 1 is supported", param);
    return srv_fail(e, 400, "invalid_request_error", param, "'%s' is not supported by this server", param);
}

static int parse_stop(const cJSON *v, srv_params *p, srv_error *e) {
    if (is_null(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return BAD("stop", "'stop' must not be empty");
        return get_string(v, "stop", SRV_MAX_STOP_LEN, &p->stop[p->n_stop++], e);
    }
    if (!cJSON_IsArray(v)) return BAD("stop", "'stop' must be a string or a list of strings");
    int n = cJSON_GetArraySize(v);
    if (n > SRV_MAX_STOP) return BAD("stop", "'stop' has %d sequences; at most %d are allowed", n, SRV_MAX_STOP);
    for (const cJSON *s = v->child; s; s = s->next) {
        if (!cJSON_IsString(s) || !s->valuestring[0]) return BAD("stop", "every 'stop' sequence must be a non-empty string");
        if (get_string(s, "stop", SRV_MAX_STOP_LEN, &p->stop[p->n_stop++], e)) return -1;
    }
    return 0;
}

static int parse_ids(const cJSON *arr, const char *param, srv_params *p, srv_error *e) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return BAD(param, "'%s' must not be empty", param);
    if (!(p->prompt_ids = malloc(sizeof(int32_t) * (size_t)n))) return srv_fail(e, 500, "server_error", param, "out of memory");
    int i = 0;
    for (const cJSON *t = arr->child; t; t = t->next, i++) {
        if (!bs_json_is_int(t, 0, INT32_MAX)) return BAD(param, "'%s'[%d] must be a token id (an integer >= 0)", param, i);
        p->prompt_ids[i] = (int32_t)t->valuedouble;
    }
    p->n_prompt_ids = n;
    return 0;
}

// prompt: a string, a list of token ids, or a list holding one of either (n = 1: one prompt per request).
static int parse_prompt(const cJSON *v, const srv_limits *lim, srv_params *p, srv_error *e) {
    if (is_null(v)) return BAD("prompt", "'prompt' is required");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && (cJSON_IsString(v->child) || cJSON_IsArray(v->child))) v = v->child;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return BAD("prompt", "'prompt' must not be empty");
        return get_string(v, "prompt", lim->max_body, &p->prompt, e);
    }
    if (cJSON_IsArray(v) && v->child && cJSON_IsNumber(v->child)) return parse_ids(v, "prompt", p, e);
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 1) return BAD("prompt", "one prompt per request: 'prompt' lists %d", cJSON_GetArraySize(v));
    return BAD("prompt", "'prompt' must be a string or a list of token ids");
}

static const char *const ROLES[] = { "system", "user", "assistant", "tool", "developer" };

// content: a string, null (an assistant turn), or a list of {"type": "text", "text": ...} parts.
static int parse_content(const cJSON *c, int i, char **out, srv_error *e) {
    if (is_null(c)) return (*out = strdup("")) ? 0 : srv_fail(e, 500, "server_error", "messages", "out of memory");
    if (cJSON_IsString(c)) return get_string(c, "messages", (size_t)-1, out, e);
    if (!cJSON_IsArray(c)) return BAD("messages", "messages[%d].content must be a string or a list of text parts", i);
    size_t len = 0;
    for (const cJSON *part = c->child; part; part = part->next) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type"), *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
            return BAD("messages", "messages[%d].content: only text parts ({\"type\": \"text\", \"text\": ...}) are supported", i);
        len += strlen(tx->valuestring);
    }
    if (!(*out = malloc(len + 1))) return srv_fail(e, 500, "server_error", "messages", "out of memory");
    len = 0;
    for (const cJSON *part = c->child; part; part = part->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        memcpy(*out + len, t, strlen(t)); len += strlen(t);
    }
    (*out)[len] = 0;
    return 0;
}

static int parse_messages(const cJSON *v, srv_params *p, srv_error *e) {
    if (!cJSON_IsArray(v) || !v->child) return BAD("messages", "'messages' must be a non-empty list");
    int n = cJSON_GetArraySize(v), i = 0;
    if (!(p->messages = calloc((size_t)n, sizeof *p->messages))) return srv_fail(e, 500, "server_error", "messages", "out of memory");
    for (const cJSON *m = v->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) return BAD("messages", "messages[%d] must be an object", i);
        const cJSON *role = NULL, *content = NULL;
        for (const cJSON *f = m->child; f; f = f->next) {
            if (!strcmp(f->string, "role")) role = f;
            else if (!strcmp(f->string, "content")) content = f;
            else if (strcmp(f->string, "name")) return BAD("messages", "messages[%d].%s is not supported by this server", i, f->string);
        }
        int known = 0;
        for (size_t r = 0; r < sizeof ROLES / sizeof *ROLES; r++) known |= cJSON_IsString(role) && !strcmp(role->valuestring, ROLES[r]);
        if (!known) return BAD("messages", "messages[%d].role must be one of system, user, assistant, tool, developer", i);
        // The templates know "system"; OpenAI's newer name for it is "developer".
        if (!(p->messages[i].role = strdup(strcmp(role->valuestring, "developer") ? role->valuestring : "system")))
            return srv_fail(e, 500, "server_error", "messages", "out of memory");
        p->n_messages = i + 1;
        if (parse_content(content, i, &p->messages[i].content, e)) return -1;
    }
    return 0;
}

static int parse_fields(const cJSON *root, int chat, const srv_limits *lim, srv_params *p, srv_error *e) {
    const cJSON *prompt = NULL, *messages = NULL;
    for (const cJSON *f = root->child; f; f = f->next) {
        const char *k = f->string;
        int rc = 0;
        if (!strcmp(k, "model")) {
            if (!cJSON_IsString(f)) return BAD("model", "'model' must be a string");
            if (lim->model_name && strcmp(f->valuestring, lim->model_name))
                return srv_fail(e, 404, "not_found_error", "model", "the model '%.200s' does not exist here; this server serves '%.200s'",
                                f->valuestring, lim->model_name);
        }
        else if (!strcmp(k, "prompt") && !chat) prompt = f;
        else if (!strcmp(k, "messages") && chat) messages = f;
        else if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens"))) {
            if (!is_null(f) && cJSON_IsNumber(f) && f->valuedouble > lim->max_tokens && bs_json_is_int(f, 1, 1e18))
                return BAD(k, "'%s' is %.0f; this server allows at most %d", k, f->valuedouble, lim->max_tokens);
            rc = get_int(f, k, 1, lim->max_tokens, &p->max_tokens, e);
        }
        else if (!strcmp(k, "temperature")) rc = get_number(f, k, 0, 2, &p->temperature, e);
        else if (!strcmp(k, "top_p")) {
            rc = get_number(f, k, 0, 1, &p->top_p, e);
            if (!rc && p->top_p <= 0) return BAD(k, "'top_p' must be above 0");
        }
        else if (!strcmp(k, "top_k")) { rc = get_int(f, k, -1, 1 << 30, &p->top_k, e); if (p->top_k < 0) p->top_k = 0; }
        else if (!strcmp(k, "seed")) {
            if (is_null(f)) continue;
            if (!bs_json_is_int(f, -9007199254740991.0, 9007199254740991.0)) return BAD(k, "'seed' must be an integer");
            p->has_seed = 1; p->seed = (uint64_t)(int64_t)f->valuedouble;
        }
        else if (!strcmp(k, "stop")) rc = parse_stop(f, p, e);
        else if (!strcmp(k, "stream")) rc = get_bool(f, k, &p->stream, e);
        else if (!strcmp(k, "stream_options")) {
            if (is_null(f)) continue;
            if (!cJSON_IsObject(f)) return BAD(k, "'stream_options' must be an object");
            for (const cJSON *o = f->child; o; o = o->next) {
                if (strcmp(o->string, "include_usage")) return BAD(k, "stream_options.%s is not supported", o->string);
                if (get_bool(o, "stream_options", &p->include_usage, e)) return -1;
            }
        }
        else if (!strcmp(k, "ignore_eos")) rc = get_bool(f, k, &p->ignore_eos, e);
        else if (chat && !strcmp(k, "chat_template_kwargs")) {
            if (is_null(f)) continue;
            if (!cJSON_IsObject(f)) return BAD(k, "'chat_template_kwargs' must be an object");
            for (const cJSON *o = f->child; o; o = o->next) {
                if (strcmp(o->string, "enable_thinking")) return BAD(k, "chat_template_kwargs.%s is not supported", o->string);
                if (get_bool(o, "chat_template_kwargs", &p->enable_thinking, e)) return -1;
            }
        }
        else if (!strcmp(k, "user")) { if (!is_null(f) && !cJSON_IsString(f)) return BAD(k, "'user' must be a string"); }
        else if (!strcmp(k, "n") || !strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty") || !strcmp(k, "logit_bias") ||
                 !strcmp(k, "logprobs") || !strcmp(k, "top_logprobs") || (!chat && (!strcmp(k, "echo") || !strcmp(k, "best_of") || !strcmp(k, "suffix"))) ||
                 (chat && (!strcmp(k, "tools") || !strcmp(k, "tool_choice") || !strcmp(k, "response_format") || !strcmp(k, "parallel_tool_calls"))))
            rc = neutral_only(f, k, e);
        else return BAD(k, "unknown field '%.60s' for %s", k, chat ? "/v1/chat/completions" : "/v1/completions");
        if (rc) return -1;
    }
    if (p->include_usage && !p->stream) return BAD("stream_options", "'stream_options' needs 'stream': true");
    return chat ? parse_messages(messages, p, e) : parse_prompt(prompt, lim, p, e);
}

int srv_parse_request(const char *body, size_t len, int chat, const srv_limits *lim, srv_params *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    p->chat = chat; p->max_tokens = -1; p->temperature = 1; p->top_p = 1; p->enable_thinking = 1;
    if (len > lim->max_body) return srv_fail(e, 413, "invalid_request_error", "", "the request body is %zu bytes; at most %zu are accepted", len, lim->max_body);
    if (!srv_utf8_valid(body, len)) return BAD("", "the request body is not valid UTF-8");
    bs_err je = {0};
    cJSON *root = bs_json_parse(body, len, "request body", &je);
    if (!root) return BAD("", "%s", je.msg);
    int rc = cJSON_IsObject(root) ? parse_fields(root, chat, lim, p, e) : BAD("", "the request body must be a JSON object");
    cJSON_Delete(root);
    if (rc) srv_params_free(p);
    return rc;
}

void srv_params_free(srv_params *p) {
    free(p->prompt); free(p->prompt_ids);
    for (int i = 0; i < p->n_messages; i++) { free(p->messages[i].role); free(p->messages[i].content); }
    free(p->messages);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}
