// Loads a GGUF with llama.cpp (the library, CPU) and computes what `blockspec dump` computes for the same
// prompt ids: every prompt row's logits, then N greedy steps. With bench/peer/compare_logits.py this checks a
// GGUF written by gguf_from_safetensors.py against blockspec on the checkpoint it came from: the same
// numbers (to bf16/fp32 rounding) mean llama.cpp reads the weights, shapes and hyper-parameters as blockspec
// does, which is what a speed comparison on "the same weights" needs. Ids go in as ids: the placeholder
// vocabulary is never tokenized.
//
//   c++ -O1 -std=c++17 -I LLAMA_SRC/include -I LLAMA_SRC/ggml/include bench/peer/llama_cpp_logits.cpp \
//       -L BUILD/bin -lllama -lggml -lggml-base -Wl,-rpath,BUILD/bin -o /tmp/llama_cpp_logits
//   /tmp/llama_cpp_logits MODEL.gguf 1,2,3,4 N OUT.f32
//
// OUT.f32: (n_prompt + N) rows of n_vocab float32 (the prompt rows, then the logits each greedy step was
// taken from); stdout: the greedy ids.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s MODEL.gguf IDS N OUT.f32\n", argv[0]); return 2; }
    std::vector<llama_token> ids;
    for (char *p = argv[2]; *p; ) { ids.push_back((llama_token)strtol(p, &p, 10)); if (*p == ',') p++; }
    int n_new = atoi(argv[3]), n = (int)ids.size();
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n + n_new + 16; cp.n_batch = n; cp.n_ubatch = n; cp.n_threads = 1; cp.n_threads_batch = 1;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot make a context\n"); return 1; }
    FILE *out = fopen(argv[4], "wb");
    if (!out) { fprintf(stderr, "cannot write %s\n", argv[4]); return 1; }
    // the prompt in one batch, every row's logits kept (a verify's view)
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode of the prompt failed\n"); return 1; }
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), V, out);
    llama_batch_free(b);
    std::vector<float> last(llama_get_logits_ith(ctx, n - 1), llama_get_logits_ith(ctx, n - 1) + V);
    for (int k = 0; k < n_new; k++) {
        int best = 0;
        for (int j = 1; j < V; j++) if (last[j] > last[best]) best = j;
        printf("%s%d", k ? "," : "", best);
        fwrite(last.data(), sizeof(float), V, out);
        llama_token t = best;
        llama_batch one = llama_batch_get_one(&t, 1);
        if (llama_decode(ctx, one)) { fprintf(stderr, "decode of step %d failed\n", k); return 1; }
        const float *l = llama_get_logits_ith(ctx, -1);
        last.assign(l, l + V);
    }
    printf("\n");
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
