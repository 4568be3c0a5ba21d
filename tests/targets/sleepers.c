/* Test target: threads asleep in the system calls a tracer's interrupt disturbs, under a seccomp filter
 * that kills the process on restart_syscall(2), and one thread that works.
 *
 *   main     -> clock_nanosleep, 100 s at a time: interrupted, it restarts through restart_syscall, which
 *               the filter answers with SIGSYS (the process dies, status -31)
 *   epoller  -> epoll_wait on an empty set: interrupted, it returns EINTR, and the process exits 3
 *   spinner  -> main_loop -> work, never in a system call
 *
 * A recording that never stops the sleeping threads, its end included, leaves the process running.
 * argv[1]: readiness fd, written once the filter is on and every thread has started.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
static volatile int started;

static void *epoller(void *arg) {
    struct epoll_event event;
    int fd = epoll_create1(0);
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    for (;;)
        if (epoll_wait(fd, &event, 1, 100000) < 0 && errno == EINTR) _exit(3);
}

NOINLINE static void work(void) {
    for (int i = 0; i < 1000; i++) sink += i;
}

NOINLINE static void main_loop(void) {
    for (;;) work();
}

static void *spinner(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    main_loop();
    return NULL;
}

int main(int argc, char **argv) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_restart_syscall, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
    pthread_t threads[2];
    if (argc < 2) return 2;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 2;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) return 2;
    if (pthread_create(&threads[0], NULL, epoller, NULL) || pthread_create(&threads[1], NULL, spinner, NULL))
        return 2;
    while (started < 2) sched_yield();
    int ready_fd = atoi(argv[1]);
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    for (;;) {
        struct timespec sleep = {100, 0};
        clock_nanosleep(CLOCK_MONOTONIC, 0, &sleep, NULL);
    }
}
