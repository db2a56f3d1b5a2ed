/* What decode_step.c and norms.c share: the thread count, and tanh as a rational function. */
#ifndef GPT2LN_COMMON_H
#define GPT2LN_COMMON_H

#ifdef _OPENMP
#include <omp.h>
#endif

/* Use n_threads threads in the parallel loops that follow (torch.get_num_threads() on the
   Python side); without OpenMP there is one. */
static inline void set_threads(int n_threads) {
#ifdef _OPENMP
    if (n_threads > 0) omp_set_num_threads(n_threads);
#else
    (void)n_threads;
#endif
}

/* tanh as a ratio of two polynomials in x (the float approximation of the Eigen library, within
   a few float roundings of tanhf), clamped where tanh is +-1 to float precision: only
   multiplications and additions, so the compiler vectorizes the loops that call it. */
static inline float tanh_rational(float x) {
    const float clamp = 7.90531110763549805f;
    x = x > clamp ? clamp : (x < -clamp ? -clamp : x);
    float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 - 8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return x * p / q;
}

#endif
