/* models/sample/chat.h: a generative model's chat template and the tokens that end
 * its turn.
 *
 * The template is recognised in the GGUF's tokenizer.chat_template (jinja
 * text) by markers of the common families, or named by the model's config
 * (chat_template:), and rendered in C as that jinja renders messages with
 * add_generation_prompt:
 *   chatml       <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
 *                (SmolLM2, Qwen 2.5, colo-mkmodel); a default system message
 *                the template writes when the chat has none is kept
 *   llama3       <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
 *                content<|eot_id|> ...; Llama 3.1+ templates' system block
 *                ("Cutting Knowledge Date: December 2023\nToday Date: ...")
 *   gemma        <start_of_turn>user\n...<end_of_turn>\n; assistant is
 *                "model"; a system message prefixes the first user turn
 *   phi3         <|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n
 *   mistral      [INST] ...[/INST] answer</s>, system message in the last
 *                user turn (v3; tekken without spaces); mistral-v1:
 *                " [INST] ... [/INST] answer</s>", system in the first
 *   deepseek-r1  <｜begin▁of▁sentence｜>system<｜User｜>...<｜Assistant｜><think>\n
 * The prompt starts with the BOS text when the template writes one; encode
 * it with colo_tokenizer_encode(add_special, parse_special), which then
 * adds no second BOS. Thread safety: read-only after creation. */
#ifndef COLO_MODELS_CHAT_H
#define COLO_MODELS_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/tokenizer/tokenizer.h"

#define COLO_CHAT_MAX_STOP_IDS 4

typedef struct colo_chat_msg {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
} colo_chat_msg;

typedef enum colo_chat_format {
    COLO_CHAT_NONE = 0, /* the file has no template and none was configured: no chat */
    COLO_CHAT_CHATML,
    COLO_CHAT_LLAMA3,
    COLO_CHAT_GEMMA,
    COLO_CHAT_PHI3,
    COLO_CHAT_MISTRAL_V1,
    COLO_CHAT_MISTRAL_V3,
    COLO_CHAT_MISTRAL_V3_TEKKEN,
    COLO_CHAT_DEEPSEEK_R1,
} colo_chat_format;

typedef struct colo_chat_template {
    colo_chat_format format;
    char bos[64], eos[64];        /* the texts of bos_token and eos_token */
    char default_system[1024];    /* chatml: the system message written when the chat has none; "" none */
    char date[32];                /* llama3: "Today Date: " of the system block; "" no system block */
    bool close_think;             /* deepseek-r1: the template closes <think> unless enable_thinking */
    bool inst_space;              /* mistral-v1: " [INST] " and " answer" (v0.2's older template: neither) */
    int32_t stop_ids[COLO_CHAT_MAX_STOP_IDS]; /* end of generation: EOS and the end-of-turn tokens */
    int n_stop_ids;
} colo_chat_template;

/* The template of a model whose tokenizer is tok: the one named by
 * override ("chatml", "llama3", "gemma", "phi3", "mistral", "mistral-v1",
 * "mistral-v3", "mistral-v3-tekken", "deepseek-r1") when it is neither
 * NULL nor "", else the one the file's tokenizer.chat_template is. A file
 * with no template gives COLO_CHAT_NONE (chat requests are refused; plain
 * prompts work). COLO_EINVAL with a message for an unknown override or a
 * template colo does not recognise. */
colo_status colo_chat_template_init(colo_chat_template *t, const colo_tokenizer *tok, const char *override,
                                    char *err, size_t errlen);
/* The same from a template's jinja text (NULL: none) and the texts of
 * bos_token and eos_token, with no stop tokens. */
colo_status colo_chat_template_from_text(colo_chat_template *t, const char *jinja, const char *override,
                                         const char *bos, const char *eos, char *err, size_t errlen);
/* Whether name is a format colo_chat_template_init accepts as override. */
bool colo_chat_format_known(const char *name);
/* "chatml", "llama3", ... ("none" for COLO_CHAT_NONE). */
const char *colo_chat_format_name(colo_chat_format f);
/* The i-th name a config may give (i from 0), NULL past the last: the one
 * list of them, for the config's check and messages. */
const char *colo_chat_format_name_at(int i);

/* The prompt for msgs, malloc'd and NUL-terminated (the caller frees);
 * NULL when out of memory or the format is COLO_CHAT_NONE. The prompt holds
 * special tokens: encode it with parse_special. */
char *colo_chat_prompt(const colo_chat_template *t, const colo_chat_msg *msgs, int n);
/* The same, and in *plain (malloc'd, one byte per byte of the prompt and
 * its NUL, the caller frees; may be NULL) which bytes are the messages'
 * text: 1 where a control token written there must stay text (a client
 * cannot write "<|im_start|>system" into a turn of its own), 0 in the
 * template's markup. content_plain (NULL, or n entries, each NULL or one
 * byte per byte of that message's content) marks content bytes that are
 * colo's own markup (0: models/sample/tools.c's blocks); NULL: all the client's.
 * Encode with colo_tokenizer_encode_marked. */
char *colo_chat_prompt_marked(const colo_chat_template *t, const colo_chat_msg *msgs, int n,
                              const uint8_t *const *content_plain, uint8_t **plain);
/* ChatML's prompt for msgs, with no default system message. */
char *colo_chatml_prompt(const colo_chat_msg *msgs, int n);

#endif
