/* Benchmark target: N busy threads that time their own execution gaps.
 *
 * Each thread first recurses DEPTH frames with 2 KiB of locals each (so a 64 KiB stack window above rsp is
 * always mapped), then spins reading CLOCK_MONOTONIC (vDSO, ~20 ns). Every gap longer than GAP_NS between
 * two readings is time the thread did not run: preemption, or a ptrace stop. On SIGUSR1 the threads stop
 * and main prints a JSON report: per thread, the number of gaps and their total and median length.
 *
 * usage: gaps_target READY_FD NTHREADS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEPTH 40
#define GAP_NS 3000L     /* shorter gaps are cache misses and timer ticks, not stops */
#define MAX_GAPS 2000000

static volatile sig_atomic_t done;
static pthread_barrier_t started;

struct gaps {
    long n;
    long total_ns;
    long *lengths;
};

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void measure(struct gaps *g) {
    long prev = now_ns();
    while (!done) {
        long t = now_ns();
        long d = t - prev;
        if (d > GAP_NS) {
            if (g->n < MAX_GAPS) g->lengths[g->n] = d;
            g->n++;
            g->total_ns += d;
        }
        prev = t;
    }
}

__attribute__((noinline)) static void descend(int depth, struct gaps *g) {
    volatile char locals[2048];
    memset((char *)locals, depth, sizeof locals);
    if (depth > 0)
        descend(depth - 1, g);
    else
        measure(g);
    __asm__ volatile("" ::: "memory");
}

static void *worker(void *arg) {
    pthread_barrier_wait(&started);
    descend(DEPTH, arg);
    return NULL;
}

static void on_usr1(int sig) { (void)sig; done = 1; }

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int ready_fd = atoi(argv[1]);
    int n = argc > 2 ? atoi(argv[2]) : 1;
    signal(SIGUSR1, on_usr1);
    struct gaps *g = calloc(n, sizeof *g);
    pthread_t *t = calloc(n, sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    pthread_barrier_init(&started, NULL, n + 1);
    for (int i = 0; i < n; i++) {
        g[i].lengths = malloc(sizeof(long) * MAX_GAPS);
        pthread_create(&t[i], &attr, worker, &g[i]);
    }
    pthread_barrier_wait(&started);
    long start = now_ns();
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    double elapsed = (now_ns() - start) / 1e9;
    printf("{\"elapsed\": %.6f, \"threads\": [", elapsed);
    for (int i = 0; i < n; i++) {
        long m = g[i].n < MAX_GAPS ? g[i].n : MAX_GAPS;
        qsort(g[i].lengths, m, sizeof(long), cmp_long);
        printf("%s{\"gaps\": %ld, \"total_ns\": %ld, \"median_ns\": %ld}", i ? ", " : "", g[i].n, g[i].total_ns,
               m ? g[i].lengths[m / 2] : 0);
    }
    printf("]}\n");
    return 0;
}
