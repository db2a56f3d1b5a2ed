/* One decoding step of a pre-norm GPT-2, for one sequence, in plain C (in the spirit of llm.c).
 *
 * gpt2ln.lab.fast.native compiles this file with the system's C compiler and calls gpt2ln_decode_step
 * once per generated token: the new token's embedding, then per block
 *     x += c_proj(attention(ln_1(x)))    (this token's key and value written into the cache)
 *     x += mlp_c_proj(gelu(c_fc(ln_2(x))))
 * then ln_f and the tied unembedding. The same formulas as gpt2ln.model.generate.decode_step, on the
 * same weights (PyTorch's own memory, never copied) and the same KV cache, with nothing between
 * the products: a decoding step reads every weight once, so its time is the time to stream the
 * weights from memory, and each matrix-vector product below splits its rows over the threads.
 *
 * Layouts (all float32, contiguous): a weight W [out, in] (nn.Linear's), x [in] -> W x + b [out];
 * the caches k, v [n_layer, n_head, max_len, head_dim]; params, per layer, in the order of the
 * enum below, then wte [vocab, d], wpe [n_ctx, d], ln_f.weight, ln_f.bias. A NULL bias or
 * LayerNorm bias is zero.
 */
#include <math.h>
#include <stddef.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include "common.h"

enum { LN1_W, LN1_B, ATTN_W, ATTN_B, ATTN_PROJ_W, ATTN_PROJ_B,
       LN2_W, LN2_B, FC_W, FC_B, MLP_PROJ_W, MLP_PROJ_B, PER_LAYER };

/* GPT-2's LayerNorm: mean over the row, biased variance, eps inside the root, then gain and bias.
   The two sums run in double (768 numbers: free), so the row statistics are exact to float. */
static void layer_norm(const float *x, const float *g, const float *b, float *y, int d, float eps) {
    double mean = 0.0, var = 0.0;
    #pragma omp simd reduction(+:mean)
    for (int i = 0; i < d; i++) mean += x[i];
    mean /= d;
    #pragma omp simd reduction(+:var)
    for (int i = 0; i < d; i++) { double c = x[i] - mean; var += c * c; }
    var /= d;
    float m = (float)mean, r = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < d; i++) y[i] = (x[i] - m) * r * g[i] + (b ? b[i] : 0.0f);
}

/* GPT-2's tanh approximation of GELU. */
static inline float gelu(float v) {
    return 0.5f * v * (1.0f + tanh_rational(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

/* The dot product of a row w with x, n numbers. With AVX2 and FMA, eight independent partial
   sums of 8 lanes each: one sum alone would make every multiply-add wait for the one before
   (its latency), which caps a core below what the memory delivers (measured: 1.09x the read
   floor for the products, against 1.05x with eight sums). */
static inline float dot(const float *w, const float *x, int n) {
#if defined(__AVX2__) && defined(__FMA__)
    if (n % 64 == 0) {
        __m256 a[8];
        for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
        for (int i = 0; i < n; i += 64)
            for (int k = 0; k < 8; k++)
                a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * k), _mm256_loadu_ps(x + i + 8 * k), a[k]);
        __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
                                 _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        h = _mm_hadd_ps(h, h);
        h = _mm_hadd_ps(h, h);
        return _mm_cvtss_f32(h);
    }
#endif
    float acc = 0.0f;
    #pragma omp simd reduction(+:acc)
    for (int i = 0; i < n; i++) acc += w[i] * x[i];
    return acc;
}

/* y = W x + b (then GELU if apply_gelu): one dot product per row of W, rows split evenly over
   the threads, so every thread streams its own contiguous share of the weights. */
static void matvec(const float *W, const float *x, const float *b, float *y, int n_out, int n_in,
                   int apply_gelu) {
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < n_out; o++) {
        float acc = dot(W + (size_t)o * n_in, x, n_in) + (b ? b[o] : 0.0f);
        y[o] = apply_gelu ? gelu(acc) : acc;
    }
}

/* Causal attention of the newest position pos over positions 0..pos, one head per iteration.
   qkv [3d] holds this token's q, k, v; k and v are written into the caches first. */
static void attention(const float *qkv, float *kc, float *vc, float *y, float *scores,
                      int n_head, int head_dim, int max_len, int pos) {
    int d = n_head * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim);
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < n_head; h++) {
        const float *q = qkv + h * head_dim;
        float *K = kc + (size_t)h * max_len * head_dim, *V = vc + (size_t)h * max_len * head_dim;
        float *s = scores + (size_t)h * max_len, *out = y + h * head_dim;
        for (int j = 0; j < head_dim; j++) {
            K[(size_t)pos * head_dim + j] = qkv[d + h * head_dim + j];
            V[(size_t)pos * head_dim + j] = qkv[2 * d + h * head_dim + j];
        }
        float max = -INFINITY;
        for (int t = 0; t <= pos; t++) {
            float dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (int j = 0; j < head_dim; j++) dot += q[j] * K[(size_t)t * head_dim + j];
            s[t] = dot * scale;
            if (s[t] > max) max = s[t];
        }
        float sum = 0.0f;
        for (int t = 0; t <= pos; t++) { s[t] = expf(s[t] - max); sum += s[t]; }
        for (int j = 0; j < head_dim; j++) out[j] = 0.0f;
        for (int t = 0; t <= pos; t++) {
            float p = s[t] / sum;
            #pragma omp simd
            for (int j = 0; j < head_dim; j++) out[j] += p * V[(size_t)t * head_dim + j];
        }
    }
}

/* Returns 0, or a negative code for bad arguments (the Python side checks them first).
   scratch holds 10 d + n_head * max_len floats. */
int gpt2ln_decode_step(const float *const *params, float *k_cache, float *v_cache, float *scratch,
                       float *logits, long token, int pos, int n_layer, int n_head, int n_embd,
                       int vocab, int max_len, float eps, int n_threads) {
    if (pos < 0 || pos >= max_len || token < 0 || token >= vocab || n_embd % n_head) return -1;
    set_threads(n_threads);
    int d = n_embd, head_dim = n_embd / n_head;
    const float *const *top = params + (size_t)n_layer * PER_LAYER;
    const float *wte = top[0], *wpe = top[1], *lnf_w = top[2], *lnf_b = top[3];
    float *x = scratch, *h = x + d, *qkv = h + d, *y = qkv + 3 * d, *f = y + d;  /* f: 4 d */
    float *scores = f + 4 * d;
    for (int i = 0; i < d; i++) x[i] = wte[(size_t)token * d + i] + wpe[(size_t)pos * d + i];
    for (int l = 0; l < n_layer; l++) {
        const float *const *p = params + (size_t)l * PER_LAYER;
        size_t layer = (size_t)l * n_head * max_len * head_dim;
        layer_norm(x, p[LN1_W], p[LN1_B], h, d, eps);
        matvec(p[ATTN_W], h, p[ATTN_B], qkv, 3 * d, d, 0);
        attention(qkv, k_cache + layer, v_cache + layer, y, scores, n_head, head_dim, max_len, pos);
        matvec(p[ATTN_PROJ_W], y, p[ATTN_PROJ_B], h, d, d, 0);
        for (int i = 0; i < d; i++) x[i] += h[i];
        layer_norm(x, p[LN2_W], p[LN2_B], h, d, eps);
        matvec(p[FC_W], h, p[FC_B], f, 4 * d, d, 1);
        matvec(p[MLP_PROJ_W], f, p[MLP_PROJ_B], h, d, 4 * d, 0);
        for (int i = 0; i < d; i++) x[i] += h[i];
    }
    layer_norm(x, lnf_w, lnf_b, h, d, eps);
    matvec(wte, h, NULL, logits, vocab, d, 0);
    return 0;
}

/* Only the step's matrix-vector products, on the same weights in the same order: what the step
   costs without LayerNorm, attention, GELU and residuals (the benchmark times it next to the step
   and the floor). x: 4 d floats in; out: max(vocab, 4 d) floats. */
void gpt2ln_products_only(const float *const *params, const float *x, float *out, int n_layer,
                          int n_embd, int vocab, int n_threads) {
    set_threads(n_threads);
    int d = n_embd;
    for (int l = 0; l < n_layer; l++) {
        const float *const *p = params + (size_t)l * PER_LAYER;
        matvec(p[ATTN_W], x, p[ATTN_B], out, 3 * d, d, 0);
        matvec(p[ATTN_PROJ_W], x, p[ATTN_PROJ_B], out, d, d, 0);
        matvec(p[FC_W], x, p[FC_B], out, 4 * d, d, 1);
        matvec(p[MLP_PROJ_W], x, p[MLP_PROJ_B], out, d, 4 * d, 0);
    }
    matvec(params[(size_t)n_layer * PER_LAYER], x, NULL, out, vocab, d, 0);
}
