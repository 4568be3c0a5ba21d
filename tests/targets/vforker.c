/* Test target: a parent that keeps spawning children with vfork, each sleeping 20 ms before _exit, so the
 * parent spends nearly all its time waiting inside vfork: main -> spawn -> vfork (glibc's __libc_vfork,
 * which holds its return address in rdi, not on the stack, around the system call).
 *
 * argv[1]: readiness fd, written once the first child has run.
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

NOINLINE static void spawn(void) {
    pid_t pid = vfork();
    if (pid == 0) {
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL); /* only system calls: the child runs on its parent's stack */
        _exit(0);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int ready_fd = atoi(argv[1]);
    spawn();
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    for (;;) spawn();
    return 0;
}
