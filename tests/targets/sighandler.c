/* Test target: a signal handler that spins, so samples land inside it.
 *
 *   main -> outer_loop -> interrupted_work (spin)   ... SIGALRM arrives ...
 *   on_alarm -> handler_work (spins for ever)  <- [__restore_rt signal frame] -> interrupted_work -> ...
 *
 * The handler writes "ready" (write(2) is async-signal-safe) and never returns. argv[1]: readiness fd.
 * argv[2] "alt": the handler runs on an alternate signal stack (sigaltstack, SA_ONSTACK).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
static int ready_fd = -1;

NOINLINE void handler_work(void) {
    for (;;) sink++;
}

NOINLINE void on_alarm(int sig) {
    (void)sig;
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) _exit(1);
        close(ready_fd);
    }
    handler_work();
}

NOINLINE void interrupted_work(void) {
    for (unsigned long i = 0; i < 1000000; i++) sink += i;
}

NOINLINE void outer_loop(void) {
    for (;;) {
        interrupted_work();
        sink++;
    }
}

int main(int argc, char **argv) {
    ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    if (argc > 2 && strcmp(argv[2], "alt") == 0) {
        stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0};
        if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) return 1;
        sa.sa_flags = SA_ONSTACK;
    }
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    outer_loop();
}
