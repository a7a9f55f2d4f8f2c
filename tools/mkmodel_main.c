/* colo-mkmodel: writes a GGUF of any architecture colo runs, with seeded
 * random weights. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mkmodel.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-mkmodel --out FILE --layers N --dim D --heads H --kv-heads KV --ffn F --vocab V\n"
               "                    [--arch llama|qwen2|qwen3|phi3|gemma3 (default llama)] [--head-dim N]\n"
               "                    [--ctx N (default 2048)] [--seed S] [--rope-base B] [--untied]\n"
               "                    [--type f32|f16|bf16|q4_0|q4_1|q5_0|q5_1|q8_0|q2_k|q3_k|q4_k|q5_k|q6_k\n"
               "                            |q4_k_m|q5_k_m (default f16; _k_m: llama.cpp's mix)]\n"
               "                    [--llama3-rope (llama: Llama 3.1's rope_freqs)] [--swa N (gemma3, default 512)]\n"
               "                    [--lora-rank R [--lora-alpha A] [--lora-seed S] [--lora-type f32|f16]\n"
               "                     [--lora-attention-only]]\n"
               "With --lora-rank, writes a LoRA adapter (rank R) of the model the other flags describe\n"
               "instead of the model.\n"
               "Real shapes:\n"
               "  Llama 3.2 1B:   --layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --llama3-rope\n"
               "  DeepSeek-R1-Distill-Llama-8B: --layers 32 --dim 4096 --heads 32 --kv-heads 8 --ffn 14336\n"
               "                  --vocab 128256 --llama3-rope --rope-base 500000 --untied --ctx 131072\n"
               "  Phi-3.5-mini:   --arch phi3 --layers 32 --dim 3072 --heads 32 --kv-heads 32 --ffn 8192 --vocab 32064\n"
               "                  --untied --ctx 131072\n"
               "  Qwen2.5-7B:     --arch qwen2 --layers 28 --dim 3584 --heads 28 --kv-heads 4 --ffn 18944\n"
               "                  --vocab 152064 --rope-base 1000000 --untied\n"
               "  Gemma 3 270M:   --arch gemma3 --layers 18 --dim 640 --heads 4 --kv-heads 1 --head-dim 256\n"
               "                  --ffn 2048 --vocab 262144 --ctx 32768\n");
}

static int parse_int(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v <= 0 || v > (1 << 24))
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    colo_mkmodel_config c = {.n_ctx = 2048, .type = COLO_F16, .seed = 1, .rope_base = 10000.0f};
    static const struct option opts[] = {
        {"out", 1, 0, 'o'},   {"layers", 1, 0, 'l'},    {"dim", 1, 0, 'd'},          {"heads", 1, 0, 'H'},
        {"kv-heads", 1, 0, 'k'}, {"ffn", 1, 0, 'f'},    {"vocab", 1, 0, 'v'},        {"ctx", 1, 0, 'c'},
        {"type", 1, 0, 't'},  {"seed", 1, 0, 's'},      {"arch", 1, 0, 'a'},         {"head-dim", 1, 0, 'D'},
        {"untied", 0, 0, 'u'}, {"llama3-rope", 0, 0, '3'}, {"swa", 1, 0, 'w'},       {"rope-base", 1, 0, 'b'},
        {"lora-rank", 1, 0, 'R'}, {"lora-alpha", 1, 0, 'A'}, {"lora-seed", 1, 0, 'S'}, {"lora-type", 1, 0, 'T'},
        {"lora-attention-only", 0, 0, 'O'}, {"help", 0, 0, 'h'},  {0, 0, 0, 0}};
    colo_mkmodel_lora lora = {.type = COLO_F32, .seed = 1};
    int o, rc = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'o': out = optarg; break;
        case 'l': rc |= parse_int(optarg, &c.n_layer); break;
        case 'd': rc |= parse_int(optarg, &c.n_embd); break;
        case 'H': rc |= parse_int(optarg, &c.n_head); break;
        case 'k': rc |= parse_int(optarg, &c.n_kv_head); break;
        case 'f': rc |= parse_int(optarg, &c.n_ff); break;
        case 'v': rc |= parse_int(optarg, &c.n_vocab); break;
        case 'c': rc |= parse_int(optarg, &c.n_ctx); break;
        case 's': c.seed = strtoull(optarg, NULL, 10); break;
        case 'D': rc |= parse_int(optarg, &c.head_dim); break;
        case 'w': rc |= parse_int(optarg, &c.n_swa); break;
        case 'u': c.untied = true; break;
        case '3': c.llama3_rope = true; break;
        case 'b': {
            char *end;
            c.rope_base = strtof(optarg, &end);
            if (*end || !(c.rope_base > 0))
                rc = -1;
            break;
        }
        case 'a':
            if (colo_llama_arch_parse(optarg, &c.arch) != COLO_OK) {
                char list[256];
                colo_llama_arch_list(list, sizeof list);
                fprintf(stderr, "colo-mkmodel: --arch %s: not one of %s\n", optarg, list);
                return 2;
            }
            break;
        case 't':
            if (colo_mkmodel_type_parse(optarg, &c.type, &c.k_mix) != COLO_OK)
                rc = -1;
            break;
        case 'R': rc |= parse_int(optarg, &lora.rank); break;
        case 'A': {
            char *end;
            lora.alpha = strtof(optarg, &end);
            if (*end || !(lora.alpha >= 0))
                rc = -1;
            break;
        }
        case 'S': lora.seed = strtoull(optarg, NULL, 10); break;
        case 'T':
            if (!strcmp(optarg, "f32"))
                lora.type = COLO_F32;
            else if (!strcmp(optarg, "f16"))
                lora.type = COLO_F16;
            else
                rc = -1;
            break;
        case 'O': lora.attention_only = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (rc || !out || !c.n_layer || !c.n_embd || !c.n_head || !c.n_kv_head || !c.n_ff || !c.n_vocab ||
        optind < argc) {
        usage(stderr);
        return 2;
    }
    char err[512];
    colo_status st = lora.rank ? colo_mkmodel_write_lora(out, &c, &lora, err, sizeof err)
                               : colo_mkmodel_write(out, &c, err, sizeof err);
    if (st == COLO_EINVAL) {
        fprintf(stderr, "colo-mkmodel: %s\n", err);
        return 2;
    }
    if (st != COLO_OK) {
        fprintf(stderr, "colo-mkmodel: %s\n", err);
        return 1;
    }
    return 0;
}
