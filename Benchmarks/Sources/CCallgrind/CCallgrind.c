#include "CCallgrind.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define BENCHMARK_HAS_CALLGRIND 1
#endif
#endif

void benchmark_callgrind_toggle_collect(void) {
#ifdef BENCHMARK_HAS_CALLGRIND
    CALLGRIND_TOGGLE_COLLECT;
#endif
}
