// libFuzzer harness for model folders' JSON: config.json [--8<-- generation_config.json], written to a
// scratch folder and loaded as a target (config + generation_config, folder handling) and as a drafter
// (z-lab DFlash / DeepSpec config, dflash_config nesting, target_layer_ids, layer_types), and its MLX
// "quantization" block (io/quant_config.h); the same bytes as a dspark.json (the seed's DSpark v1 sidecar,
// io/dspark_v1_config.h).
#include "fuzz_util.h"
#include "io/config.h"
#include "io/drafter_config.h"
#include "io/dspark_v1_config.h"
#include "io/json.h"
#include "io/quant_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[2]; size_t len[2];
    int n = fuzz_split(data, size, part, len, 2);
    fuzz_put("config.json", part[0], (long)len[0]);
    fuzz_put("generation_config.json", n > 1 ? part[1] : NULL, n > 1 ? (long)len[1] : -1);
    bs_err err;
    bs_qwen3_config c;
    if (bs_qwen3_config_load(&c, fuzz_dir(), &err) == 0) {
        if (c.n_eos < 0 || c.n_eos > BS_MAX_EOS || c.head_dim <= 0 || c.n_heads % c.n_kv_heads) abort();
    } else if (!strstr(err.msg, fuzz_dir())) abort();   // the message names the file
    bs_drafter_config d;
    if (bs_drafter_config_load(&d, fuzz_dir(), &err) == 0) {
        if (d.n_taps <= 0 || d.n_taps > BS_MAX_TAPS || d.block_size < 2) abort();
    } else if (!strstr(err.msg, fuzz_dir())) abort();
    cJSON *root = bs_json_parse((const char *)part[0], len[0], "dspark.json", &err);
    if (root) {
        bs_dspark_v1_config v;
        if (bs_dspark_v1_config_parse(&v, root, "dspark.json", &err) == 0) {
            if (v.gamma < 1 || v.gamma > BS_MAX_DRAFT || v.d_draft % v.n_heads || v.markov_rank < 1 || !(v.eps > 0)) abort();
        } else if (!strstr(err.msg, "dspark.json")) abort();
        cJSON_Delete(root);
    }
    bs_quant_config q;   // the "quantization" block of MLX checkpoints
    if (bs_quant_config_load(&q, fuzz_dir(), &err) == 0) {
        if (q.present && ((q.bits != 4 && q.bits != 8) || (q.group != 32 && q.group != 64 && q.group != 128))) abort();
        int bits, group;
        for (int i = 0; i < q.n; i++)
            if (bs_quant_config_for(&q, q.over[i].module, &bits, &group) && bits != 4 && bits != 8) abort();
        bs_quant_config_free(&q);
    } else if (!strstr(err.msg, fuzz_dir())) abort();
    return 0;
}
