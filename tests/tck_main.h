/*
 * tck_main.h - what every Check test program needs around its tests: a
 * test case made of a list of tests (TCK_CASE, tck_loop_case for a loop
 * test), a main() that runs one suite (TCK_MAIN, or tck_run when main has
 * more to do first), and a private temp dir (tck_mkdtemp, tck_rmdir).
 *
 * The suite runs in Check's default mode (each test forked, CK_FORK=no
 * still honoured); the exit status is non-zero if any test failed, which
 * is what `make check` reads.
 */
#ifndef TESTS_TCK_MAIN_H
#define TESTS_TCK_MAIN_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Adds to s a test case `name` with the tests given (NULL ends the
 * list); returns it, for fixtures and timeouts. Use TCK_CASE. */
static inline TCase *tck_case(Suite *s, const char *name, ...)
{
    TCase *tc = tcase_create(name);
    va_list ap;
    va_start(ap, name);
    for (const TTest *t; (t = va_arg(ap, const TTest *)) != NULL;)
        tcase_add_test(tc, t);
    va_end(ap);
    suite_add_tcase(s, tc);
    return tc;
}

#define TCK_CASE(s, name, ...)                                             \
    tck_case((s), (name), __VA_ARGS__, (const TTest *)NULL)

/* Adds to s a test case `name` holding the loop test t (run for _i from
 * start to end - 1); returns it, for more tests. */
static inline TCase *tck_loop_case(Suite *s, const char *name,
                                   const TTest *t, int start, int end)
{
    TCase *tc = tck_case(s, name, (const TTest *)NULL);
    tcase_add_loop_test(tc, t, start, end);
    return tc;
}

/* A fresh private directory /tmp/NAME.XXXXXX in dir[size] (short, so
 * UNIX socket paths inside it fit); tck_rmdir removes it with its
 * contents. */
static inline void tck_mkdtemp(char *dir, size_t size, const char *name)
{
    ck_assert_int_lt(snprintf(dir, size, "/tmp/%s.XXXXXX", name),
                     (int)size);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static inline void tck_rmdir(const char *dir)
{
    char cmd[256];
    ck_assert_int_lt(snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir),
                     (int)sizeof cmd);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs s; EXIT_SUCCESS if every test passed. */
static inline int tck_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* main() running the suite suite_fn() builds. */
#define TCK_MAIN(suite_fn)                                                 \
    int main(void)                                                         \
    {                                                                      \
        return tck_run(suite_fn());                                        \
    }

#endif /* TESTS_TCK_MAIN_H */
