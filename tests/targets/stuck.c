/* Test target: a thread that spins, and a main thread stuck in uninterruptible sleep ("D"): waiting in
 * vfork for a child that sleeps for 30 s before _exit, as a hung program waits on a disk or a lock in
 * the kernel. A D thread does not stop for ptrace until it wakes.
 *
 * argv[1]: readiness fd, written by the child once the parent is inside vfork.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

static void *spin(void *arg) {
    (void)arg;
    for (;;) sink++;
    return NULL;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    pthread_t thread;
    pthread_create(&thread, NULL, spin, NULL);
    if (vfork() == 0) {
        if (ready_fd >= 0 && write(ready_fd, "ready\n", 6) != 6) _exit(1);
        struct timespec pause = {30, 0};
        nanosleep(&pause, NULL);  /* only system calls: the child runs on its parent's stack */
        _exit(0);
    }
    return 0;
}
