/*
 * test_buf.c - the growable byte buffer (lib/base/buf.c, rvl_buf).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

static void test_buf_starts_empty_and_becomes_a_string_on_the_first_add(void **state)
{
    (void)state;
    rvl_buf b = {0};
    assert_null(b.p);
    assert_int_equal(rvl_buf_add(&b, NULL, 0), 0);
    assert_non_null(b.p);
    assert_int_equal(b.n, 0);
    assert_string_equal(b.p, "");
    rvl_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.n, 0);
    assert_int_equal(b.cap, 0);
    rvl_buf_free(NULL);
}

static void test_buf_appends_text_and_bytes_nul_terminated(void **state)
{
    (void)state;
    rvl_buf b = {0};
    assert_int_equal(rvl_buf_adds(&b, "hello"), 0);
    assert_int_equal(rvl_buf_adds(&b, NULL), 0);
    assert_int_equal(rvl_buf_add(&b, ", world!", 7), 0);
    assert_int_equal(b.n, 12);
    assert_string_equal(b.p, "hello, world");
    const unsigned char bin[4] = {0, 1, 0, 2};
    assert_int_equal(rvl_buf_add(&b, bin, sizeof bin), 0);
    assert_int_equal(b.n, 16);
    assert_memory_equal(b.p + 12, bin, sizeof bin);
    assert_int_equal(b.p[16], 0);
    assert_false(b.oom);
    rvl_buf_free(&b);
}

static void test_buf_grows_past_many_doublings(void **state)
{
    (void)state;
    rvl_buf b = {0};
    char chunk[1000];
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (char)('a' + i % 26);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(rvl_buf_add(&b, chunk, sizeof chunk), 0);
    assert_int_equal(b.n, 1000 * sizeof chunk);
    assert_true(b.cap > b.n);
    for (int i = 0; i < 1000; i++)
        assert_memory_equal(b.p + (size_t)i * sizeof chunk, chunk, sizeof chunk);
    assert_int_equal(b.p[b.n], 0);
    rvl_buf_free(&b);
}

static void test_buf_reserve_leaves_room_to_write_in_place(void **state)
{
    (void)state;
    rvl_buf b = {0};
    assert_int_equal(rvl_buf_adds(&b, "ab"), 0);
    assert_int_equal(rvl_buf_reserve(&b, 5000), 0);
    assert_true(b.cap - b.n >= 5001);
    assert_int_equal(b.n, 2);
    assert_string_equal(b.p, "ab");
    const size_t cap = b.cap;
    memset(b.p + b.n, 'x', 5000);
    b.n += 5000;
    b.p[b.n] = 0;
    assert_int_equal(rvl_buf_reserve(&b, 0), 0);
    assert_int_equal(b.cap, cap);   /* the room was enough */
    assert_int_equal(strlen(b.p), 5002);
    rvl_buf_free(&b);
}

static void test_buf_take_hands_over_the_string_and_empties_the_buffer(void **state)
{
    (void)state;
    rvl_buf b = {0};
    char *s = rvl_buf_take(&b);
    assert_non_null(s);
    assert_string_equal(s, "");
    free(s);
    rvl_buf_adds(&b, "kept");
    s = rvl_buf_take(&b);
    assert_string_equal(s, "kept");
    assert_null(b.p);
    assert_int_equal(b.n, 0);
    free(s);
}

static void test_buf_failed_add_keeps_contents_and_sticks(void **state)
{
    (void)state;
    rvl_buf b = {0};
    assert_int_equal(rvl_buf_adds(&b, "abc"), 0);
    /* more than any buffer can hold: fails without allocating */
    assert_int_equal(rvl_buf_add(&b, "x", SIZE_MAX - 1), RVL_ENOMEM);
    assert_non_null(strstr(rvl_errmsg(), "out of memory"));
    assert_true(b.oom);
    assert_int_equal(b.n, 3);
    assert_string_equal(b.p, "abc");
    /* every later add fails too, so a run of adds is checked once */
    assert_int_equal(rvl_buf_adds(&b, "d"), RVL_ENOMEM);
    assert_int_equal(rvl_buf_reserve(&b, 1), RVL_ENOMEM);
    assert_string_equal(b.p, "abc");
    /* a caller that rolled back may go on */
    b.oom = false;
    assert_int_equal(rvl_buf_adds(&b, "d"), 0);
    assert_string_equal(b.p, "abcd");
    assert_int_equal(rvl_buf_add(&b, "x", SIZE_MAX), RVL_ENOMEM);
    assert_null(rvl_buf_take(&b));   /* and frees */
    assert_null(b.p);
    assert_false(b.oom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_starts_empty_and_becomes_a_string_on_the_first_add),
        cmocka_unit_test(test_buf_appends_text_and_bytes_nul_terminated),
        cmocka_unit_test(test_buf_grows_past_many_doublings),
        cmocka_unit_test(test_buf_reserve_leaves_room_to_write_in_place),
        cmocka_unit_test(test_buf_take_hands_over_the_string_and_empties_the_buffer),
        cmocka_unit_test(test_buf_failed_add_keeps_contents_and_sticks),
    };
    return cmocka_run_group_tests_name("buf", tests, NULL, NULL);
}
