/*
 * bench_cputime.c - helper of bench_vs_perfetto.sh: runs a command and
 * appends the CPU time it used (user + system, children it waited for
 * included, in microseconds from wait4's rusage) as one line to FILE.
 * /usr/bin/time prints centiseconds, too coarse for a short producer.
 * SIGTERM and SIGINT are passed on to the command.
 *
 * Usage: bench_cputime FILE COMMAND [ARG]...
 * Exit: the command's exit status (128 + signal if it was killed), 127 if
 * it could not be started.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile pid_t child;

static void forward(int sig)
{
    if (child > 0)
        kill(child, sig);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_cputime FILE COMMAND [ARG]...\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench_cputime: fork");
        return 127;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "bench_cputime: cannot run %s\n", argv[2]);
        _exit(127);
    }
    child = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("bench_cputime: wait4");
            return 127;
        }
    }
    FILE *f = fopen(argv[1], "a");
    if (f) {
        long long us = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
                       1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
        fprintf(f, "%lld\n", us);
        fclose(f);
    }
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
