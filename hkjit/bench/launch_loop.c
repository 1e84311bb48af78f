/* The floor under every launch path: cuLaunchKernel called back to back from C, no interpreter in
 * between. hkjit.bench.jit_overhead builds it with hostcc and reports it beside the Python and
 * native paths, so a path's cost above the driver's own is visible. */
#define _POSIX_C_SOURCE 199309L   /* clock_gettime and CLOCK_MONOTONIC under -std=c11 */
#include <stdint.h>
#include <time.h>

typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned smem, void *stream, void **params, void **extra);

/* Launch `f` (1 block of 32 threads) `n` times on `stream`; returns the seconds taken, or -1.0
 * with the first error code in *error. */
__attribute__((visibility("default")))
double hk_launch_loop(void *launch, void *f, void *stream, void **params, int n, int *error) {
    struct timespec t0, t1;
    launch_fn cu_launch = (launch_fn)launch;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        int err = cu_launch(f, 1, 1, 1, 32, 1, 1, 0, stream, params, 0);
        if (err) {
            *error = err;
            return -1.0;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}
