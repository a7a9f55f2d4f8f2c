/* Fuzz target: the YAML configuration (config/config.h) from arbitrary
 * bytes, through colo_config_parse as colo_config_load uses it, one
 * model's entry (colo_config_parse_model, the body of POST /admin/models),
 * one LoRA adapter's (colo_config_parse_adapter, the body of POST
 * /admin/models/{name}/adapters) and the size syntax
 * (colo_config_parse_size) on the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static colo_config cfg; /* large: not on the stack */
    fuzz_init_once(NULL);
    char err[1024];
    err[0] = 0;
    colo_status st = colo_config_parse((const char *)data, size, "fuzz.yaml", &cfg, err, sizeof err);
    if (st == COLO_OK) {
        if (cfg.n_models < 1 || cfg.n_models > COLO_CFG_MAX_MODELS)
            abort(); /* a parsed config has at least one model */
        (void)colo_config_api_key(&cfg);
    } else if (!err[0]) {
        abort(); /* every refusal says why */
    }
    static colo_model_cfg mc;
    err[0] = 0;
    st = colo_config_parse_model((const char *)data, size, "body", "", &mc, err, sizeof err);
    if (st == COLO_OK) {
        if (!mc.name[0] || !mc.kind[0] || !mc.path[0] || !(mc.memory_fraction > 0 && mc.memory_fraction <= 1))
            abort(); /* a parsed entry has what a load needs */
    } else if (!err[0]) {
        abort();
    }
    static colo_adapter_cfg ad;
    err[0] = 0;
    st = colo_config_parse_adapter((const char *)data, size, "body", "", &mc, &ad, err, sizeof err);
    if (st == COLO_OK) {
        if (!ad.name[0] || !ad.path[0])
            abort(); /* a parsed adapter has its name and file */
    } else if (!err[0]) {
        abort();
    }
    if (size < 64) {
        char s[64];
        memcpy(s, data, size);
        s[size] = 0;
        uint64_t v;
        (void)colo_config_parse_size(s, &v);
    }
    return 0;
}
