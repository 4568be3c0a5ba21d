/* Test target: three worker threads, each spinning in its own call chain, plus main blocked in join.
 *
 *   alpha:  alpha_worker -> alpha_outer -> alpha_inner -> spin
 *   beta:   beta_worker  -> beta_outer  -> beta_inner  -> spin
 *   gamma:  gamma_worker -> gamma_inner -> spin
 *
 * Threads are named (pthread_setname_np) after their chain. argv[1]: readiness fd.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
static pthread_barrier_t started;

NOINLINE void spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i;
}

NOINLINE void alpha_inner(void) { spin(100000); sink++; }
NOINLINE void alpha_outer(void) { alpha_inner(); sink++; }
NOINLINE void *alpha_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    for (;;) { alpha_outer(); sink++; }
    return NULL;
}

NOINLINE void beta_inner(void) { spin(100000); sink++; }
NOINLINE void beta_outer(void) { beta_inner(); sink++; }
NOINLINE void *beta_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    for (;;) { beta_outer(); sink++; }
    return NULL;
}

NOINLINE void gamma_inner(void) { spin(100000); sink++; }
NOINLINE void *gamma_worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&started);
    for (;;) { gamma_inner(); sink++; }
    return NULL;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    void *(*workers[])(void *) = {alpha_worker, beta_worker, gamma_worker};
    const char *names[] = {"alpha", "beta", "gamma"};
    pthread_t t[3];
    pthread_barrier_init(&started, NULL, 4);
    for (int i = 0; i < 3; i++) {
        pthread_create(&t[i], NULL, workers[i], NULL);
        pthread_setname_np(t[i], names[i]);
    }
    pthread_barrier_wait(&started);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    return 0;
}
