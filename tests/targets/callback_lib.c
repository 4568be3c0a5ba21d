/* A test shared library that calls back into Python through a ctypes function pointer:
 *   c_iterate -> c_dispatch -> callback (Python)
 * Built with -O2 and without frame pointers: unwinding through it needs its CFI. */
#define NOINLINE __attribute__((noinline))

typedef int (*callback_t)(int);

volatile int lib_sink;

NOINLINE int c_dispatch(callback_t cb, int i) {
    int r = cb(i);
    lib_sink += r;
    return r;
}

NOINLINE int c_iterate(callback_t cb, int n) {
    int total = 0;
    for (int i = 0; i < n; i++) total += c_dispatch(cb, i);
    lib_sink++;
    return total;
}
