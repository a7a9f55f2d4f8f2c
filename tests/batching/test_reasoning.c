/* A reasoning model's output (a DeepSeek-R1 distill's chat: its template
 * opens <think>) is split into reasoning and answer, streamed and whole:
 * - pieces before </think> go out as reasoning, after it as text, with the
 *   blank lines after </think> dropped, whatever pieces the marker is
 *   split across (the last bytes that may begin it are held back);
 * - an output that stops while thinking is all reasoning, held bytes too;
 * - the outcome's text and reasoning are the same split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batching/kind_llama.c"

typedef struct seen {
    char reasoning[512], text[512];
    size_t n_reasoning, n_text;
    int pieces;
} seen;

static bool sink_token(void *ud, colo_request *r, int32_t token, const char *piece, size_t len)
{
    (void)token;
    seen *s = ud;
    char *dst = r->token_reasoning ? s->reasoning : s->text;
    size_t *n = r->token_reasoning ? &s->n_reasoning : &s->n_text;
    assert_true(*n + len < sizeof s->reasoning);
    memcpy(dst + *n, piece, len);
    *n += len;
    dst[*n] = 0;
    s->pieces++;
    return true;
}

/* Feeds pieces (NULL-ended) to a choice inside <think>; returns what the sink saw. */
static void feed(const char *const *pieces, seen *s, bool finish)
{
    memset(s, 0, sizeof *s);
    colo_request r = {0};
    llama_kind k = {0};
    k.sink = (colo_kind_sink){.token = sink_token, .ud = s};
    llama_job j = {.r = &r, .k = &k};
    llama_choice ch = {.j = &j, .think = 1};
    for (int i = 0; pieces[i]; i++) /* as job_on_token does */
        if (ch.think == 1)
            think_piece(&ch, -1, pieces[i], strlen(pieces[i]));
        else
            emit(&ch, -1, pieces[i], strlen(pieces[i]), false);
    if (finish && ch.think == 1 && ch.n_held) /* as job_on_done does */
        emit(&ch, -1, ch.held, (size_t)ch.n_held, true);
}

static void test_stream_split(void **state)
{
    (void)state;
    seen s;
    static const char *const whole[] = {"Okay, 2+2 is 4.", "</think>\n\n", "The answer is 4.", NULL};
    feed(whole, &s, true);
    assert_string_equal(s.reasoning, "Okay, 2+2 is 4.");
    assert_string_equal(s.text, "The answer is 4.");
    /* the marker split over three pieces, the answer in the last */
    static const char *const split[] = {"Hmm</", "thi", "nk>\nParis", " is it.", NULL};
    feed(split, &s, true);
    assert_string_equal(s.reasoning, "Hmm");
    assert_string_equal(s.text, "Paris is it.");
    /* "</" that is not a marker stays reasoning */
    static const char *const lookalike[] = {"a </b> c", " d", "</think>e", NULL};
    feed(lookalike, &s, true);
    assert_string_equal(s.reasoning, "a </b> c d");
    assert_string_equal(s.text, "e");
    /* stopped while thinking: everything is reasoning, the held tail too */
    static const char *const cut[] = {"still thinking </thi", NULL};
    feed(cut, &s, true);
    assert_string_equal(s.reasoning, "still thinking </thi");
    assert_int_equal(s.n_text, 0);
}

static void test_outcome_split(void **state)
{
    (void)state;
    colo_req_choice c = {.text = "Let me see.</think>\n\nParis.", .text_len = strlen("Let me see.</think>\n\nParis.")};
    split_reasoning(&c);
    assert_int_equal(c.reasoning_len, strlen("Let me see."));
    assert_memory_equal(c.reasoning, "Let me see.", c.reasoning_len);
    assert_int_equal(c.text_len, strlen("Paris."));
    assert_memory_equal(c.text, "Paris.", c.text_len);
    colo_req_choice open = {.text = "no end yet", .text_len = 10};
    split_reasoning(&open);
    assert_int_equal(open.reasoning_len, 10);
    assert_int_equal(open.text_len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_split),
        cmocka_unit_test(test_outcome_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
