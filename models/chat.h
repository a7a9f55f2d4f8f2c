/* models/chat.h: a generative model's chat template and the tokens that end
 * its turn.
 *
 * The template is recognised from the model's vocabulary (and, as model
 * families are added, its GGUF tokenizer.chat_template): today ChatML
 * ("<|im_start|>role\ncontent<|im_end|>\n" per message, then
 * "<|im_start|>assistant\n"), which SmolLM2, Qwen and colo-mkmodel's
 * synthetic models use. Thread safety: read-only after creation. */
#ifndef COLO_MODELS_CHAT_H
#define COLO_MODELS_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "models/bpe.h"

#define COLO_CHAT_MAX_STOP_IDS 4

typedef enum colo_chat_format { COLO_CHAT_CHATML = 0 } colo_chat_format;

typedef struct colo_chat_template {
    colo_chat_format format;
    int32_t stop_ids[COLO_CHAT_MAX_STOP_IDS]; /* end of generation: EOS and the end-of-turn tokens */
    int n_stop_ids;
} colo_chat_template;

/* The template of a model whose tokenizer is bpe. */
void colo_chat_template_init(colo_chat_template *t, const colo_bpe *bpe);
/* "chatml". */
const char *colo_chat_format_name(colo_chat_format f);
/* Bytes of the prompt colo_chat_apply writes for msgs (NUL included). */
size_t colo_chat_prompt_bytes(const colo_chat_template *t, const colo_chat_msg *msgs, int n);
/* Writes the prompt for msgs into out (cap >= colo_chat_prompt_bytes);
 * returns its length. The prompt holds special tokens: encode it with
 * allow_special. */
size_t colo_chat_apply(const colo_chat_template *t, const colo_chat_msg *msgs, int n, char *out, size_t cap);

/* The prompt for msgs, malloc'd and NUL-terminated; NULL when out of memory. */
char *colo_chat_prompt(const colo_chat_template *t, const colo_chat_msg *msgs, int n);
/* ChatML's prompt for msgs (colo_chat_prompt with the ChatML template). */
char *colo_chatml_prompt(const colo_chat_msg *msgs, int n);

#endif
