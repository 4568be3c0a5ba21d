/* Test target: blocked at a known point, for comparison with gdb's backtrace.
 *
 *   main -> level_one -> level_two -> level_three -> read(2) on a pipe nobody writes to
 *
 * argv[1]: readiness fd, written just before the read.
 */
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
static int pipe_fds[2];
static int ready_fd = -1;

NOINLINE void level_three(void) {
    char c;
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) exit(1);
        close(ready_fd);
    }
    if (read(pipe_fds[0], &c, 1) > 0) sink++;
}

NOINLINE void level_two(void) { level_three(); sink++; }
NOINLINE void level_one(void) { level_two(); sink++; }

int main(int argc, char **argv) {
    ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    if (pipe(pipe_fds) != 0) return 1;
    level_one();
    return 0;
}
