/* Test target: a known native call chain and a deep recursion.
 *
 *   main -> a -> b -> c -> spin        (half the time)
 *   main -> recurse x DEPTH -> spin    (the other half; each level keeps 512 bytes of locals)
 *
 * argv[1]: a file descriptor to write "ready\n" to once the hot loop runs (tests never sleep to sync).
 * argv[2]: optional recursion depth (default 24, i.e. more than 12 KiB of stack).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i;
}

NOINLINE void c(void) { spin(200000); sink++; }
NOINLINE void b(void) { c(); sink++; }
NOINLINE void a(void) { b(); sink++; }

NOINLINE void recurse(int depth) {
    volatile char pad[512];
    memset((char *)pad, depth, sizeof pad);
    if (depth > 1)
        recurse(depth - 1);
    else
        spin(200000);
    sink += pad[7];
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    int depth = argc > 2 ? atoi(argv[2]) : 24;
    a();
    recurse(depth);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (;;) {
        a();
        recurse(depth);
    }
}
