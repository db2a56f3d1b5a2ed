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

#define LANES 32 /* double accumulators per sum: four AVX-512 registers, eight AVX ones */

/* A row's statistics in one pass, in double precision: s1 = sum of (x[i] - x[0]) and, where s2 is
 * not NULL, *s2 = sum of (x[i] - x[0])^2 (x[0] = 0 for RMSNorm's plain sum of squares, shifted = 0).
 * Each of the LANES accumulators adds every LANES-th term, and they are then added pairwise, so
 * the rounding error stays near double's 1e-16 per term at any width d, where a float32 running
 * sum loses about d times 6e-8 of its size (4.5 standard deviations wrong at d = 2^20 with an
 * offset of 1e4). The variance is s2/d - (s1/d)^2: the shift by x[0] bounds the cancellation,
 * since (x[0] - mean)^2 <= d * variance, so its relative error is below d * 1e-16, far below
 * float32's 6e-8 for any row that fits in memory. In double the squares neither overflow nor
 * underflow for any float32 input. One pass, not two: the row is read once from the cache. */
static double row_sums(const float *x, int d, int shifted, double *s2) {
    double a1[LANES] = {0}, a2[LANES] = {0};
    const double x0 = shifted ? (double)x[0] : 0.0;
    int i = 0;
    if (s2) {
        for (; i + LANES <= d; i += LANES) {
            #pragma omp simd
            for (int j = 0; j < LANES; j++) {
                double c = (double)x[i + j] - x0;
                a1[j] += c;
                a2[j] += c * c;
            }
        }
    } else {
        for (; i + LANES <= d; i += LANES) {
            #pragma omp simd
            for (int j = 0; j < LANES; j++) a1[j] += (double)x[i + j] - x0;
        }
    }
    for (int j = 0; i < d; i++, j++) {
        double c = (double)x[i] - x0;
        a1[j] += c;
        a2[j] += c * c;
    }
    for (int n = LANES / 2; n > 0; n /= 2)
        for (int j = 0; j < n; j++) {
            a1[j] += a1[j + n];
            a2[j] += a2[j + n];
        }
    if (s2) *s2 = a2[0];
    return a1[0];
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
            float shift = 0.0f, shift_lo = 0.0f, scale = alpha;
            if (kind == LAYER_NORM) { /* mean and biased variance, around x[0] (see row_sums) */
                double s2, s1 = row_sums(xr, d, 1, &s2), m1 = s1 / d;
                double var = s2 / d - m1 * m1;
                /* the mean as two floats, shift + shift_lo: x - shift is exact near the mean
                   (Sterbenz), so (x - shift) - shift_lo is x minus the mean, rounded once */
                double mean = xr[0] + m1;
                shift = (float)mean;
                shift_lo = (float)(mean - shift);
                scale = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + eps));
            } else if (kind == RMS_NORM) {
                double ss;
                row_sums(xr, d, 0, &ss);
                scale = (float)(1.0 / sqrt(ss / d + eps));
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
                    tmp[i] = (xc[i] - shift - shift_lo) * scale * (wc ? wc[i] : 1.0f) + (bc ? bc[i] : 0.0f);
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
