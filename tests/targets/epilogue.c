/* Test target: small frame-pointer functions that end in a call, so many samples land in an epilogue.
 *
 *   main -> caller -> wrap -> leaf
 *
 * wrap is `push %rbp; mov %rsp,%rbp; call leaf; pop %rbp; ...; ret` at -O2 -fno-omit-frame-pointer: after
 * its `pop %rbp`, gcc's CFI still says rbp is saved at CFA-16, 8 bytes below rsp (the red zone).
 *
 * argv[1]: a file descriptor to write "ready\n" to once the hot loop runs.
 */
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile long sink;

NOINLINE long leaf(long x) { sink = x; return x + 1; }
NOINLINE long wrap(long x) { return leaf(x) * 3; }
NOINLINE long caller(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += wrap(i);
    return s;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    sink = caller(1000);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (;;) sink = caller(1000000);
}
