/* config/config.h: colo's YAML configuration, parsed into typed structs.
 *
 * colo_config_load reads one YAML file; every value is checked and every
 * error names the place and the field: "FILE:LINE:COLUMN: FIELD: what is
 * wrong" (unknown keys, wrong types, values out of range, missing required
 * fields, duplicate model names, memory fractions or SM shares summing past
 * 1, sm_share without scheduler.policy: partition, path and source both or
 * neither). Checks that need the model file (weights plus the minimum KV
 * cache fit in the model's memory) are the loader's: the parsed values are
 * here for it. Every key is documented in docs/CONFIG.md.
 *
 * A colo_config is plain data: no pointers, copyable with memcpy, no free
 * function. Thread safety: the functions keep no state; the api key lookup
 * reads the environment. */
#ifndef COLO_CONFIG_CONFIG_H
#define COLO_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/model_cfg.h"
#include "runtime/backend.h"
#include "runtime/cosched.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

#define COLO_CFG_MAX_MODELS 32

#define COLO_CFG_MAX_CORS_ORIGINS 16

typedef enum colo_device_choice { COLO_DEVICE_AUTO = 0, COLO_DEVICE_CPU = 1, COLO_DEVICE_CUDA = 2 } colo_device_choice;

typedef struct colo_server_cfg {
    char listen_host[256];     /* "127.0.0.1" by default; IPv6 without brackets ("::1") */
    int listen_port;           /* 8080 by default; 0 = any free port */
    colo_device_choice device; /* auto (default): CUDA when usable, else CPU */
    int threads;               /* CPU worker pool; 0 (default) = one per core */
    uint64_t cpu_memory_bytes; /* CPU memory budget; 0 (default) = physical memory */
    uint64_t gpu_memory_bytes; /* CUDA memory budget; 0 (default) = the device's memory */
    bool elastic_memory;       /* CUDA: arenas map memory as used (default true, where the device can) */
    bool cuda_graphs;          /* CUDA: decode steps launched as graphs (default false) */
    char api_key_env[128];     /* name of the variable holding the API key; "" = none */
    char admin_key_env[128];   /* the variable holding the admin key (/admin/ routes); default COLO_ADMIN_KEY */
    uint64_t max_body_bytes;   /* default 1 MiB */
    uint64_t max_header_bytes; /* request line + headers; default 16 KiB */
    int max_connections;       /* default 4096 */
    int read_timeout_ms;       /* a request's headers and body, from its first byte; default 30000 */
    int write_timeout_ms;      /* no write progress while output is pending; default 30000 */
    int idle_timeout_ms;       /* keep-alive connection with no request; default 60000 */
    int shutdown_timeout_ms;   /* graceful shutdown: in-flight requests get this long; default 10000 */
    int drain_delay_ms;        /* on SIGTERM: not ready but still serving this long, then shut down; default 0 */
    uint64_t max_unsent_bytes; /* responses and stream events queued for all clients, unsent; default 256 MiB */
    int telemetry_interval_ms; /* device sampling and /v1/stats history step; default 2000 */
    int min_residency_ms;      /* a model woken more recently is evicted last (batching/evictor.h); default 2000 */
    /* browser origins answered with CORS headers ("https://app.example",
     * or "*" for any); none by default */
    char cors_origins[COLO_CFG_MAX_CORS_ORIGINS][256];
    int n_cors_origins;
} colo_server_cfg;

typedef struct colo_scheduler_cfg {
    colo_sched_policy policy; /* default COLO_SCHED_PRIORITY */
    /* policy priority: best-effort (priority: low) work allowed in flight
     * while a higher-priority step runs (scheduler.best_effort_cap). */
    int best_effort_max_steps; /* best-effort steps that may start; default 0 */
    int best_effort_max_ops;   /* ops a best-effort step may queue; default 8 */
    int best_effort_max_us;    /* estimated best-effort work in microseconds; 0 (default) = no time cap */
    int quantum_us;            /* policy timeslice: a member's turn; default 10000 */
    double best_effort_min_share; /* policy priority: best-effort models' floor of device time, [0, 0.95]; default 0 */
    /* every policy: the floor of the batch class (lines of OpenAI batches)
     * under interactive load, [0, 0.5]: its share of step time across
     * models and of its model's steps; default COLO_CFG_BATCH_MIN_SHARE */
    double batch_min_share;
} colo_scheduler_cfg;

#define COLO_CFG_BATCH_MIN_SHARE 0.02

/* ---- tenants (docs/TENANTS.md): organization -> project -> key ---- */
#define COLO_CFG_MAX_ORGS 32
#define COLO_CFG_MAX_PROJECTS 128
#define COLO_CFG_MAX_KEYS 256
#define COLO_CFG_MAX_TENANT_MODELS 8
#define COLO_CFG_TENANT_NAME 48

/* Quotas of one level; -1 = no limit (the default), 0 = nothing allowed. */
typedef struct colo_quota_cfg {
    int64_t requests_per_minute;
    int64_t tokens_per_minute; /* prompt + completion; embeddings count input tokens */
    int concurrent;            /* requests in flight */
} colo_quota_cfg;

/* What every level (organization, project, key) may set. */
typedef struct colo_tenant_level_cfg {
    char name[COLO_CFG_TENANT_NAME];
    colo_quota_cfg quotas;
    double weight; /* fair-share weight, > 0; default 1 */
    char models[COLO_CFG_MAX_TENANT_MODELS][64]; /* allowed models; n_models 0 = all */
    colo_cfg_mark model_marks[COLO_CFG_MAX_TENANT_MODELS];
    int n_models;
    colo_priority max_priority; /* highest priority a request may ask for; default high */
    colo_cfg_mark mark;
} colo_tenant_level_cfg;

typedef struct colo_org_cfg {
    colo_tenant_level_cfg l;
} colo_org_cfg;

typedef struct colo_project_cfg {
    colo_tenant_level_cfg l;
    int org; /* index into tenants.orgs */
} colo_project_cfg;

typedef struct colo_key_cfg {
    colo_tenant_level_cfg l;
    uint8_t sha256[32]; /* SHA-256 of the key's bytes; never the key itself */
    int project;        /* index into tenants.projects */
} colo_key_cfg;

typedef struct colo_tenants_cfg {
    colo_org_cfg orgs[COLO_CFG_MAX_ORGS];
    int n_orgs;
    colo_project_cfg projects[COLO_CFG_MAX_PROJECTS];
    int n_projects;
    colo_key_cfg keys[COLO_CFG_MAX_KEYS];
    int n_keys;
} colo_tenants_cfg;

/* usage: the ledger of finished requests (SQLite). */
typedef struct colo_usage_cfg {
    bool enabled;  /* default true */
    char db[1024]; /* default: $XDG_STATE_HOME/colo/usage.sqlite, else ~/.local/state/colo/usage.sqlite,
                      else (neither variable set) usage.sqlite beside the config file */
    int lock_wait_ms; /* how long to wait for another process's lock on db at startup and at exit; default 5000 */
} colo_usage_cfg;

/* batches: the Files and Batch APIs (docs/API.md). Files and batches are
 * kept beside the usage ledger: the files in a folder "files" next to
 * usage.db, the batches' state in tables of usage.db itself. */
typedef struct colo_batches_cfg {
    bool enabled;            /* default true */
    uint64_t max_file_bytes; /* an uploaded file's limit (413 past it); default 100 MiB */
    int max_lines;           /* lines of a batch's input; default 50000 */
    int concurrency;         /* lines of one batch in flight at once; default 4 */
    int window_s;            /* what completion_window "24h" gives a batch before it expires; default 86400 */
} colo_batches_cfg;

/* responses: what the Responses API keeps (store, previous_response_id),
 * in tables of usage.db. */
typedef struct colo_responses_cfg {
    bool enabled;        /* default true */
    bool store_default;  /* a body without "store" is kept (OpenAI's default); default true */
    int retention_s;     /* a kept response is gone this long after it was made; default 30 days */
} colo_responses_cfg;

/* pricing: what a model's use costs, for colo-usage reports. */
typedef struct colo_price_cfg {
    char model[64];
    double per_device_hour;      /* currency units per device-hour; 0 = none */
    double per_million_tokens;   /* per million prompt + completion tokens; 0 = none */
} colo_price_cfg;

typedef struct colo_pricing_cfg {
    char currency[16]; /* default "USD" */
    colo_price_cfg models[COLO_CFG_MAX_MODELS];
    int n_models;
} colo_pricing_cfg;

typedef struct colo_config {
    char file[1024]; /* as given to load/parse */
    colo_server_cfg server;
    colo_scheduler_cfg scheduler;
    colo_model_cfg models[COLO_CFG_MAX_MODELS];
    int n_models;    /* >= 1 */
    colo_tenants_cfg tenants;
    colo_usage_cfg usage;
    colo_pricing_cfg pricing;
    colo_batches_cfg batches;
    colo_responses_cfg responses;
} colo_config;

/* Reads and checks path into *cfg (defaults filled in). COLO_EIO when the
 * file cannot be read, COLO_EINVAL with "FILE:LINE:COLUMN: FIELD: ..." in
 * err otherwise. Relative model paths are taken from path's folder. */
colo_status colo_config_load(const char *path, colo_config *cfg, char *err, size_t errlen);

/* The same from memory; file names the source in messages and its folder
 * anchors relative model paths. */
colo_status colo_config_parse(const char *yaml, size_t len, const char *file, colo_config *cfg, char *err,
                              size_t errlen);

/* One model's entry (the keys of one item of `models:`, as YAML or JSON,
 * which is YAML) into *out, with the checks and messages of
 * colo_config_load: "SOURCE:LINE:COLUMN: model.FIELD: ...". Checks across
 * models (names, fractions, policy-specific keys) are the caller's.
 * base_dir anchors a relative path: ("" = the working directory). */
colo_status colo_config_parse_model(const char *text, size_t len, const char *source, const char *base_dir,
                                    colo_model_cfg *out, char *err, size_t errlen);

/* One LoRA adapter's entry (the keys of one item of a model's
 * `adapters:`: name, path, scale, priority, sla, on_overload) into *out;
 * what it leaves out is base's (priority, SLA). Messages as above. */
colo_status colo_config_parse_adapter(const char *text, size_t len, const char *source, const char *base_dir,
                                      const colo_model_cfg *base, colo_adapter_cfg *out, char *err, size_t errlen);

/* A config with every default and no models (for programs and tests that
 * build one by hand). */
void colo_config_defaults(colo_config *cfg);

/* The model cache folder: ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models. */
void colo_config_model_cache(char *buf, size_t len);

/* The API key: the value of the variable named by server.api_key_env when
 * that is set and the variable is non-empty, else NULL (no authentication).
 * The pointer is the environment's: copy it before changing the environment. */
const char *colo_config_api_key(const colo_config *cfg);
/* The admin key, the same way from server.admin_key_env; NULL: none (the
 * admin routes then answer only on a loopback listener). */
const char *colo_config_admin_key(const colo_config *cfg);

/* Hex of a SHA-256 (64 digits, either case) into out. */
colo_status colo_config_parse_sha256(const char *hex, uint8_t out[32]);

/* Sizes as the config accepts them: "1048576", "512KiB", "8GiB", "1MB", "2G".
 * COLO_EINVAL on anything else or on overflow. */
colo_status colo_config_parse_size(const char *s, uint64_t *out);

const char *colo_device_choice_name(colo_device_choice d);

#endif
