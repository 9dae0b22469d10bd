// blockspec make-random -c config.json --out DIR [--seed S] [--shards N]
// config.json's architectures[0] picks the kind: Qwen3ForCausalLM, LlamaForCausalLM or Gemma4ForCausalLM (targets), DFlashDraftModel,
// DFlash2DraftModel, Qwen3DSparkModel or Gemma4DSparkModel (drafters); a dspark.json ("kind": "dspark-drafter": the seed's DSpark v1 drafter,
// docs/dspark-v1.md) writes that format (dspark.json + model.safetensors, bf16) instead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/config.h"
#include "io/drafter_config.h"
#include "io/dspark_v1_config.h"
#include "io/json.h"
#include "io/random_ckpt.h"

int cmd_make_random(int argc, char **argv) {
    const char *cfg_path = NULL, *out = NULL, *v;
    long seed = 0, shards = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) { if (!(cfg_path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) { if (!(out = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--seed")) { if (!(v = cli_value(argc, argv, &i)) || cli_int("--seed", v, 0, 1L << 62, &seed)) return 2; }
        else if (!strcmp(argv[i], "--shards")) { if (!(v = cli_value(argc, argv, &i)) || cli_int("--shards", v, 1, 1000, &shards)) return 2; }
        else if (!strcmp(argv[i], "--help")) { fprintf(stderr, "usage: blockspec make-random -c config.json --out DIR [--seed S] [--shards N]\n"); return 0; }
        else { fprintf(stderr, "blockspec make-random: unknown option %s\n", argv[i]); return 2; }
    }
    if (!cfg_path || !out) { fprintf(stderr, "usage: blockspec make-random -c config.json --out DIR [--seed S] [--shards N]\n"); return 2; }
    bs_err err = {0};
    size_t len;
    char *txt = bs_read_file(cfg_path, &len, &err);
    cJSON *root = txt ? bs_json_load(cfg_path, &err) : NULL;
    bs_tensor_spec *specs = NULL; int n = 0, rc = 1;
    bs_qwen3_config c;
    if (!root) goto out;
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
    const char *cfg_name = "config.json";
    if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "dspark-drafter")) {
        bs_dspark_v1_config vc;
        if (bs_dspark_v1_config_parse(&vc, root, cfg_path, &err) || bs_dspark_v1_tensor_specs(&vc, &specs, &n, &err)) goto out;
        cfg_name = BS_DSPARK_V1_FILE;
    } else if (cJSON_IsString(arch) && bs_is_drafter_arch(arch->valuestring)) {
        bs_drafter_config dc;
        if (bs_drafter_config_parse(&dc, root, cfg_path, &err) || bs_drafter_tensor_specs(&dc, &specs, &n, &err)) goto out;
    } else if (cJSON_IsString(arch) && bs_model_arch_of(root) < 0) {
        bs_fail(&err, "%s: make-random writes Qwen3ForCausalLM, LlamaForCausalLM, Gemma4ForCausalLM, DFlashDraftModel, DFlash2DraftModel, Qwen3DSparkModel and Gemma4DSparkModel checkpoints, not \"%s\"",
                cfg_path, arch->valuestring); goto out;
    } else if (bs_qwen3_config_parse(&c, root, cfg_path, &err) || bs_qwen3_tensor_specs(&c, &specs, &n, &err)) goto out;
    mkdir(out, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, cfg_name);
    FILE *f = fopen(path, "w");
    if (!f || fwrite(txt, 1, len, f) != len) { if (f) fclose(f); bs_fail(&err, "%s: cannot write", path); goto out; }
    fclose(f);
    if (bs_write_random_tensors(out, specs, n, (int)shards, (uint64_t)seed, &err)) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec make-random: %s\n", err.msg);
    free(specs); free(txt); cJSON_Delete(root);
    return rc;
}
