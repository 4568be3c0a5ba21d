// Test target: C++ at -O2 without frame pointers.
//
//   main -> run_sort -> std::sort(...) -> [std::__introsort internals] -> lambda -> compare_deep
//        -> compare_leaf
//   main -> run_sort -> maybe_throw (throws; caught in run_sort's loop)
//
// argv[1]: readiness fd.
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <unistd.h>
#include <vector>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE bool compare_leaf(int a, int b) {
    for (int i = 0; i < 200; i++) sink += i;
    return a < b;
}

NOINLINE bool compare_deep(int a, int b) {
    bool r = compare_leaf(a, b);
    sink++;
    return r;
}

NOINLINE void maybe_throw(int i) {
    if (i % 3 == 0) throw std::runtime_error("sometimes");
    sink++;
}

NOINLINE void run_sort(int round) {
    std::vector<int> v(2000);
    for (size_t i = 0; i < v.size(); i++) v[i] = (int)((i * 2654435761u + round) % 10007);
    std::sort(v.begin(), v.end(), [](int a, int b) { return compare_deep(a, b); });
    try {
        maybe_throw(round);
    } catch (const std::exception &) {
        sink++;
    }
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    run_sort(0);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (int round = 1;; round++) run_sort(round);
}
