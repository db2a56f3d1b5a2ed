/* One-pass norm kernels for the modules gpt2ln.LayerNorm, RMSNorm and DyT on large CPU inputs
 * (gpt2ln.lab.fast.kernels calls them, through gpt2ln.lab.fast.native, when autograd is not recording).
 *
 * A norm reads x [rows, d] once and writes y once, so its speed limit is a copy's. Each row is
 * read twice from the cache (its statistics, then the output) but once from memory, and the
 * output goes out with streaming ("non-temporal") stores where the CPU has them and the row is
 * aligned: they write to memory without first reading the destination into the cache, which
 * an ordinary store does, so the kernel moves two bytes per byte of x, as a copy does, not
 * three. Rows are split evenly over the threads. float32 only; NULL weight or bias: 1 or 0.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "common.h"
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#define CHUNK 1024 /* a row's output is computed in pieces of this many floats, then stored */

/* dst[0:n] = src[0:n], with streaming stores where possible. */
static void put(float *dst, const float *src, int n) {
#if defined(__AVX512F__)
    if (((uintptr_t)dst & 63) == 0 && n % 16 == 0) {
        for (int i = 0; i < n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
        return;
    }
#elif defined(__AVX__)
    if (((uintptr_t)dst & 31) == 0 && n % 8 == 0) {
        for (int i = 0; i < n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
        return;
    }
#endif
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void fence(void) {
#if defined(__AVX512F__) || defined(__AVX__)
    _mm_sfence(); /* streaming stores are visible to other threads after this */
#endif
}

enum { LAYER_NORM, RMS_NORM, DYT };

static void norm_rows(int kind, const float *x, const float *w, const float *b, float alpha,
                      float *y, long rows, int d, float eps) {
    #pragma omp parallel
    {
        float tmp[CHUNK];
        #pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            const float *xr = x + r * d;
            float *yr = y + r * d;
            float shift = 0.0f, scale = alpha;
            if (kind == LAYER_NORM) { /* mean, then the biased variance around it */
                float sum = 0.0f, var = 0.0f;
                #pragma omp simd reduction(+:sum)
                for (int i = 0; i < d; i++) sum += xr[i];
                shift = sum / d;
                #pragma omp simd reduction(+:var)
                for (int i = 0; i < d; i++) { float c = xr[i] - shift; var += c * c; }
                scale = 1.0f / sqrtf(var / d + eps);
            } else if (kind == RMS_NORM) {
                float ss = 0.0f;
                #pragma omp simd reduction(+:ss)
                for (int i = 0; i < d; i++) ss += xr[i] * xr[i];
                scale = 1.0f / sqrtf(ss / d + eps);
            }
            if (kind == DYT) { /* no statistics: one loop, ordinary stores (measured faster here:
                                  tanh's arithmetic, not the stores, is what this loop waits on) */
                #pragma omp simd
                for (int i = 0; i < d; i++)
                    yr[i] = tanh_rational(scale * xr[i]) * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
                continue;
            }
            for (int c0 = 0; c0 < d; c0 += CHUNK) {
                int n = d - c0 < CHUNK ? d - c0 : CHUNK;
                const float *xc = xr + c0, *wc = w ? w + c0 : NULL, *bc = b ? b + c0 : NULL;
                #pragma omp simd
                for (int i = 0; i < n; i++)
                    tmp[i] = (xc[i] - shift) * scale * (wc ? wc[i] : 1.0f) + (bc ? bc[i] : 0.0f);
                put(yr + c0, tmp, n);
            }
        }
        fence();
    }
}

void gpt2ln_layer_norm(const float *x, const float *w, const float *b, float *y, long rows, int d,
                       float eps, int n_threads) {
    set_threads(n_threads);
    norm_rows(LAYER_NORM, x, w, b, 1.0f, y, rows, d, eps);
}

void gpt2ln_rms_norm(const float *x, const float *w, float *y, long rows, int d, float eps,
                     int n_threads) {
    set_threads(n_threads);
    norm_rows(RMS_NORM, x, w, NULL, 1.0f, y, rows, d, eps);
}

void gpt2ln_dyt(const float *x, float alpha, const float *w, const float *b, float *y, long rows,
                int d, int n_threads) {
    set_threads(n_threads);
    norm_rows(DYT, x, w, b, alpha, y, rows, d, 0.0f);
}

/* 1 if this library was built with OpenMP (its loops use every thread), else 0 (one thread). */
int gpt2ln_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}
