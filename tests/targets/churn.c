/* Test target: threads created and joined all the time (thread churn), each doing a little work.
 *
 * Main keeps up to 4 short-lived workers alive, joining and replacing them forever. argv[1]: readiness fd,
 * written after the first batch has come and gone. argv[2]: optional seconds after which main returns 0.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void churn_work(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i;
}

NOINLINE void *churn_worker(void *arg) {
    churn_work((unsigned long)arg);
    return NULL;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    double seconds = argc > 2 ? atof(argv[2]) : 0;
    double end = now() + seconds;
    for (long b = 0; seconds <= 0 || now() < end; b++) {
        pthread_t t[4];
        /* 2-8 ms of work each: short-lived, yet long enough that a 200 Hz sampler meets several */
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn_worker, (void *)(2000000UL * (i + 1)));
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        if (b == 0 && ready_fd >= 0) {
            if (write(ready_fd, "ready\n", 6) != 6) return 1;
            close(ready_fd);
        }
    }
    return 0;
}
