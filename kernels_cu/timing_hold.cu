#include "tc_common.cuh"

// Keeps its stream busy for `ns` nanoseconds of the GPU's global timer.  The graph timings
// (tensorconv.timing.time_graph) queue it just before their start event: the replay they
// time is then queued before the stream reaches that event, so the host's launch of the
// replay (a few microseconds, more on a busy host) is not counted as kernel time.
extern "C" __global__ void tc_hold(unsigned long long ns)
{
    tc::wait_prior_grids();
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
