/* models/sample/tools.h: function calling in a model's own chat format.
 *
 * A chat with tools is rewritten into plain messages the model's template
 * (models/sample/chat.h) then renders, in the way its family's template does it:
 *   hermes   (ChatML: SmolLM2, Qwen 2.5, Hermes; also the fallback for
 *            Gemma, Phi-3 and DeepSeek-R1): the tool list in the system
 *            message between <tools></tools>, each call as
 *            <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
 *            results as a user turn of <tool_response>...</tool_response>
 *            (Qwen 2.5's template)
 *   llama3   the tool list and instructions at the head of the first user
 *            message, a call as {"name": ..., "parameters": {...}}, results
 *            in "ipython" turns (Llama 3.1's template)
 *   mistral  [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the last user
 *            message's text, calls as [TOOL_CALLS][{"name": ...,
 *            "arguments": {...}}], results as [TOOL_RESULTS]{...}[/TOOL_RESULTS]
 *            in a user turn (inside [INST], where Mistral's own template
 *            puts them outside)
 * A forced call (tool_choice required or a named function) is the JSON
 * object alone ({"name": ..., "arguments"|"parameters": {...}}),
 * constrained by colo_tools_call_schema; hermes prompts end with
 * "<tool_call>\n" then. colo_tools_parse reads calls back from an output
 * in any of these forms. Thread safety: pure functions. */
#ifndef COLO_MODELS_TOOLS_H
#define COLO_MODELS_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "models/sample/chat.h"

typedef struct colo_tool_def {
    const char *name;
    const char *description; /* "" or NULL when none */
    const char *parameters;  /* JSON Schema text; NULL: any object */
} colo_tool_def;

typedef struct colo_tool_call {
    char *name;      /* malloc'd */
    char *arguments; /* a JSON object, compact, malloc'd */
} colo_tool_call;

/* A message of a chat with tools: the plain message and, for an assistant,
 * the calls it made (name, arguments) or, for role "tool", the name of the
 * function answered (may be NULL). */
typedef struct colo_tool_msg {
    colo_chat_msg m;
    const char *const *call_names;
    const char *const *call_args;
    int n_calls;
    const char *tool_name;
    const char *tool_call_id;
} colo_tool_msg;

/* The prompt of msgs with tools (n_tools may be 0: only the messages'
 * calls and results are rewritten), malloc'd (the caller frees); forced:
 * the output will be a forced call. NULL when out of memory or the
 * template is COLO_CHAT_NONE. */
char *colo_tools_prompt(const colo_chat_template *t, const colo_tool_msg *msgs, int n, const colo_tool_def *tools,
                        int n_tools, bool forced);
/* The same, and in *plain (as colo_chat_prompt_marked) which bytes are
 * the client's: contents, tool definitions, calls and results; the
 * format's markup ([TOOL_CALLS], <tool_call>...) is not. */
char *colo_tools_prompt_marked(const colo_chat_template *t, const colo_tool_msg *msgs, int n,
                               const colo_tool_def *tools, int n_tools, bool forced, uint8_t **plain);

/* The JSON Schema (malloc'd text) of one call of tools[only] (only < 0:
 * of any of them) in t's format; NULL with a message when a function's
 * parameters are not a JSON object. */
char *colo_tools_call_schema(const colo_chat_template *t, const colo_tool_def *tools, int n_tools, int only,
                             char *err, size_t errlen);

/* The calls in text (an output), of functions named in tools: *calls
 * malloc'd (free with colo_tools_calls_free), *content_len the length of
 * the text before the first call. 0 calls when there is none. -1 when out
 * of memory. */
int colo_tools_parse(const char *text, size_t len, const colo_tool_def *tools, int n_tools, colo_tool_call **calls,
                     size_t *content_len);
void colo_tools_calls_free(colo_tool_call *calls, int n);

#endif
