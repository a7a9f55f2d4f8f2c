#include "models/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_stop(colo_chat_template *t, int id)
{
    if (id < 0 || t->n_stop_ids >= COLO_CHAT_MAX_STOP_IDS)
        return;
    for (int i = 0; i < t->n_stop_ids; i++)
        if (t->stop_ids[i] == id)
            return;
    t->stop_ids[t->n_stop_ids++] = id;
}

void colo_chat_template_init(colo_chat_template *t, const colo_bpe *bpe)
{
    memset(t, 0, sizeof *t);
    t->format = COLO_CHAT_CHATML;
    add_stop(t, colo_bpe_eos(bpe));
    add_stop(t, colo_bpe_find(bpe, "<|im_end|>"));
    add_stop(t, colo_bpe_find(bpe, "<|endoftext|>"));
}

const char *colo_chat_format_name(colo_chat_format f)
{
    switch (f) {
    case COLO_CHAT_CHATML: return "chatml";
    }
    return "unknown";
}

size_t colo_chat_prompt_bytes(const colo_chat_template *t, const colo_chat_msg *msgs, int n)
{
    (void)t;
    size_t need = sizeof "<|im_start|>assistant\n";
    for (int i = 0; i < n; i++)
        need += strlen(msgs[i].role) + strlen(msgs[i].content) + sizeof "<|im_start|>\n<|im_end|>\n";
    return need;
}

size_t colo_chat_apply(const colo_chat_template *t, const colo_chat_msg *msgs, int n, char *out, size_t cap)
{
    (void)t;
    size_t o = 0;
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role, msgs[i].content);
    if (o < cap)
        o += (size_t)snprintf(out + o, cap - o, "<|im_start|>assistant\n");
    return o < cap ? o : cap - 1;
}

char *colo_chat_prompt(const colo_chat_template *t, const colo_chat_msg *msgs, int n)
{
    size_t cap = colo_chat_prompt_bytes(t, msgs, n);
    char *out = malloc(cap);
    if (out)
        colo_chat_apply(t, msgs, n, out, cap);
    return out;
}

char *colo_chatml_prompt(const colo_chat_msg *msgs, int n)
{
    colo_chat_template t = {.format = COLO_CHAT_CHATML};
    return colo_chat_prompt(&t, msgs, n);
}
