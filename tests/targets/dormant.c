/* Test target: many threads asleep for good, and one that sleeps until told to work (nprof's dormancy).
 *
 *   sleeper x N -> nap -> read on a pipe no one writes
 *   worker      -> read on the go fd; once a byte arrives: worker_main -> crunch for ALONE_NS, then starts
 *                  "late" (late_main -> late_spin), then worker_main -> crunch for good. Alone first, so
 *                  that only the worker's own run can end its dormancy, not a thread's start
 *   main        -> pause
 *
 * argv[1]: readiness fd, written once every thread has started; argv[2]: the go fd; argv[3]: N; argv[4], if
 * given: a program the worker execs when told, instead of working (which ends every other thread).
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ALONE_NS 600000000LL

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
static volatile int started;
static int never[2];
static int go_fd;
static char *exec_path;

NOINLINE static void nap(void) {
    char byte;
    while (read(never[0], &byte, 1) != 0) {
    }
}

static void *sleeper(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    nap();
    return NULL;
}

NOINLINE static void late_spin(void) {
    for (;;) sink++;
}

NOINLINE static void late_main(void) { late_spin(); }

static void *late(void *arg) {
    (void)arg;
    late_main();
    return NULL;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* busy until `until` (ns, CLOCK_MONOTONIC; 0: for good), looking at the clock rarely */
NOINLINE static void crunch(long long until) {
    for (;;) {
        for (int i = 0; i < 1000000; i++) sink += 3;
        if (until && now_ns() >= until) return;
    }
}

NOINLINE static void worker_main(void) {
    pthread_t other;
    crunch(now_ns() + ALONE_NS);
    pthread_create(&other, NULL, late, NULL);
    pthread_setname_np(other, "late");
    crunch(0);
}

static void *worker(void *arg) {
    char byte;
    (void)arg;
    pthread_setname_np(pthread_self(), "worker");
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    if (read(go_fd, &byte, 1) != 1) return NULL;
    if (exec_path) {
        char *argv[] = {exec_path, NULL};
        execv(exec_path, argv);
        _exit(2);
    }
    worker_main();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4 || pipe(never) != 0) return 2;
    go_fd = atoi(argv[2]);
    exec_path = argc > 4 ? argv[4] : NULL;
    int n = atoi(argv[3]);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 16);
    for (int i = 0; i < n; i++)
        if (pthread_create(&thread, &attr, sleeper, NULL)) return 2;
    if (pthread_create(&thread, NULL, worker, NULL)) return 2;
    while (started < n + 1) usleep(100);
    int ready_fd = atoi(argv[1]);
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    for (;;) pause();
}
