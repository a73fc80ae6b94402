// The engine's one FFT: a mixed-radix Stockham transform (radix 4/2/3/5 butterflies,
// other primes by direct DFT) over split real and imaginary arrays of a value type V.
// V is double for the feature extractors' STFTs (n_fft 1920, 512, 400: double keeps
// near-silent bins exact enough for log features, where an f32 DFT-as-matmul is off by
// 1e-5 of full scale) and HiFT's host STFT; V is an 8-lane float vector in HiFT's FFT
// convolution kernels, where each element of the arrays is 8 independent channels.
//
// A plan per length holds the factorisation and the twiddles in T (double or float, the
// precision of V's lanes); transforms then run without allocating. A real frame of even
// length n goes through one complex FFT of length n/2 (RealFft).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cbs {

// Always inlined: HiFT's kernels are built twice (baseline and AVX2), and the transform
// must be compiled into each with that build's vector instructions.
#define CBS_FFT_INL __attribute__((always_inline)) inline

namespace fft_detail {

// A complex value as two V (real, imaginary), with the few operations the butterflies use.
template <class V>
struct Cx {
    V r, i;
};
template <class V>
CBS_FFT_INL Cx<V> operator+(const Cx<V>& a, const Cx<V>& b) { return {a.r + b.r, a.i + b.i}; }
template <class V>
CBS_FFT_INL Cx<V> operator-(const Cx<V>& a, const Cx<V>& b) { return {a.r - b.r, a.i - b.i}; }
template <class V, class T>
CBS_FFT_INL Cx<V> scale(const Cx<V>& a, T c) { return {a.r * c, a.i * c}; }
template <class V>
CBS_FFT_INL Cx<V> mul_neg_i(const Cx<V>& a) { return {a.i, -a.r}; }  // a * (-i)
template <class V, class T>
CBS_FFT_INL Cx<V> mul(const Cx<V>& a, T wr, T wi) { return {a.r * wr - a.i * wi, a.r * wi + a.i * wr}; }
template <class V>
CBS_FFT_INL Cx<V> load(const V* re, const V* im, int idx) { return {re[idx], im[idx]}; }
template <class V>
CBS_FFT_INL void store(V* re, V* im, int idx, const Cx<V>& v) {
    re[idx] = v.r;
    im[idx] = v.i;
}

// One stage of radix p of FftPlan::forward at s (the product of the radices before it),
// m = n / (s p): reads a[q + s (j + r m)], writes b[q + s (p j + k)] for j < m, q < s,
// k, r < p; the twiddles W_n^(j k s) (j k s < n, no wrap-around) are wr, wi.
//
// Radix 4 and 2 carry the work of power-of-two lengths (HiFT's tiles): the butterflies at
// j = 0 skip their twiddles (all 1). Where s > 1 the twiddles of a j are loaded once for
// its s butterflies, as values (a store through V* may alias the T table, so a pointer
// would be re-read after every store); at s = 1 (the first stage) each j has one
// butterfly and the loop runs over j.
template <bool kTw, class V, class T>
CBS_FFT_INL void butterfly4(const V* ar, const V* ai, V* br, V* bi, int a, int b, int s, int sm, T w1r, T w1i,
                            T w2r, T w2i, T w3r, T w3i) {
    const Cx<V> a0 = load(ar, ai, a), a1 = load(ar, ai, a + sm);
    const Cx<V> a2 = load(ar, ai, a + 2 * sm), a3 = load(ar, ai, a + 3 * sm);
    const Cx<V> u0 = a0 + a2, u1 = a0 - a2, u2 = a1 + a3, u3 = mul_neg_i(a1 - a3);
    store(br, bi, b, u0 + u2);
    if constexpr (kTw) {
        store(br, bi, b + s, mul(u1 + u3, w1r, w1i));
        store(br, bi, b + 2 * s, mul(u0 - u2, w2r, w2i));
        store(br, bi, b + 3 * s, mul(u1 - u3, w3r, w3i));
    } else {
        store(br, bi, b + s, u1 + u3);
        store(br, bi, b + 2 * s, u0 - u2);
        store(br, bi, b + 3 * s, u1 - u3);
    }
}
template <class V, class T>
CBS_FFT_INL void stage4(const V* ar, const V* ai, V* br, V* bi, int s, int m, const T* wr, const T* wi) {
    const int sm = s * m;
    const T one(1), zero(0);
    if (s == 1) {
        butterfly4<false>(ar, ai, br, bi, 0, 0, 1, sm, one, zero, one, zero, one, zero);
        for (int j = 1; j < m; ++j)
            butterfly4<true>(ar, ai, br, bi, j, 4 * j, 1, sm, wr[j], wi[j], wr[2 * j], wi[2 * j], wr[3 * j], wi[3 * j]);
        return;
    }
    for (int q = 0; q < s; ++q) butterfly4<false>(ar, ai, br, bi, q, q, s, sm, one, zero, one, zero, one, zero);
    for (int j = 1; j < m; ++j) {
        const int t1 = j * s, t2 = 2 * t1, t3 = 3 * t1;
        const T w1r = wr[t1], w1i = wi[t1], w2r = wr[t2], w2i = wi[t2], w3r = wr[t3], w3i = wi[t3];
        for (int q = 0; q < s; ++q)
            butterfly4<true>(ar, ai, br, bi, q + s * j, q + 4 * s * j, s, sm, w1r, w1i, w2r, w2i, w3r, w3i);
    }
}
template <bool kTw, class V, class T>
CBS_FFT_INL void butterfly2(const V* ar, const V* ai, V* br, V* bi, int a, int b, int s, int sm, T w1r, T w1i) {
    const Cx<V> a0 = load(ar, ai, a), a1 = load(ar, ai, a + sm);
    store(br, bi, b, a0 + a1);
    if constexpr (kTw)
        store(br, bi, b + s, mul(a0 - a1, w1r, w1i));
    else
        store(br, bi, b + s, a0 - a1);
}
template <class V, class T>
CBS_FFT_INL void stage2(const V* ar, const V* ai, V* br, V* bi, int s, int m, const T* wr, const T* wi) {
    const int sm = s * m;
    const T one(1), zero(0);
    if (s == 1) {
        butterfly2<false>(ar, ai, br, bi, 0, 0, 1, sm, one, zero);
        for (int j = 1; j < m; ++j) butterfly2<true>(ar, ai, br, bi, j, 2 * j, 1, sm, wr[j], wi[j]);
        return;
    }
    for (int q = 0; q < s; ++q) butterfly2<false>(ar, ai, br, bi, q, q, s, sm, one, zero);
    for (int j = 1; j < m; ++j) {
        const T w1r = wr[j * s], w1i = wi[j * s];
        for (int q = 0; q < s; ++q) butterfly2<true>(ar, ai, br, bi, q + s * j, q + 2 * s * j, s, sm, w1r, w1i);
    }
}

// Radix 3, W_3 = -1/2 - i h, h = sqrt(3)/2.
template <class V, class T>
CBS_FFT_INL void stage3(const V* ar, const V* ai, V* br, V* bi, int s, int m, const T* wr, const T* wi) {
    const int sm = s * m;
    const T h = static_cast<T>(0.86602540378443864676), half(0.5);
    for (int j = 0; j < m; ++j) {
        const int t1 = j * s, t2 = 2 * t1;
        const T w1r = wr[t1], w1i = wi[t1], w2r = wr[t2], w2i = wi[t2];
        for (int q = 0; q < s; ++q) {
            const int a = q + s * j, b = q + 3 * s * j;
            const Cx<V> a0 = load(ar, ai, a), a1 = load(ar, ai, a + sm), a2 = load(ar, ai, a + 2 * sm);
            const Cx<V> u = a1 + a2, c = a0 - scale(u, half), d = mul_neg_i(scale(a1 - a2, h));
            store(br, bi, b, a0 + u);
            store(br, bi, b + s, mul(c + d, w1r, w1i));
            store(br, bi, b + 2 * s, mul(c - d, w2r, w2i));
        }
    }
}

// Radix 5: with s1 = a1 + a4, d1 = a1 - a4, s2 = a2 + a3, d2 = a2 - a3 and W_5 = c1 - i n1,
// X1,4 = a0 + c1 s1 + c2 s2 -/+ i (n1 d1 + n2 d2), X2,3 = a0 + c2 s1 + c1 s2 -/+ i (n2 d1 - n1 d2).
template <class V, class T>
CBS_FFT_INL void stage5(const V* ar, const V* ai, V* br, V* bi, int s, int m, const T* wr, const T* wi) {
    const int sm = s * m;
    const T c1 = static_cast<T>(0.30901699437494742410), c2 = static_cast<T>(-0.80901699437494742410);
    const T n1 = static_cast<T>(0.95105651629515357212), n2 = static_cast<T>(0.58778525229247312917);
    for (int j = 0; j < m; ++j) {
        const int t1 = j * s, t2 = 2 * t1, t3 = 3 * t1, t4 = 4 * t1;
        const T w1r = wr[t1], w1i = wi[t1], w2r = wr[t2], w2i = wi[t2];
        const T w3r = wr[t3], w3i = wi[t3], w4r = wr[t4], w4i = wi[t4];
        for (int q = 0; q < s; ++q) {
            const int a = q + s * j, b = q + 5 * s * j;
            const Cx<V> a0 = load(ar, ai, a), a1 = load(ar, ai, a + sm), a2 = load(ar, ai, a + 2 * sm);
            const Cx<V> a3 = load(ar, ai, a + 3 * sm), a4 = load(ar, ai, a + 4 * sm);
            const Cx<V> s1 = a1 + a4, d1 = a1 - a4, s2 = a2 + a3, d2 = a2 - a3;
            const Cx<V> e1 = a0 + scale(s1, c1) + scale(s2, c2), e2 = a0 + scale(s1, c2) + scale(s2, c1);
            const Cx<V> f1 = mul_neg_i(scale(d1, n1) + scale(d2, n2));
            const Cx<V> f2 = mul_neg_i(scale(d1, n2) - scale(d2, n1));
            store(br, bi, b, a0 + s1 + s2);
            store(br, bi, b + s, mul(e1 + f1, w1r, w1i));
            store(br, bi, b + 2 * s, mul(e2 + f2, w2r, w2i));
            store(br, bi, b + 3 * s, mul(e2 - f2, w3r, w3i));
            store(br, bi, b + 4 * s, mul(e1 - f1, w4r, w4i));
        }
    }
}

// Any other prime p: a direct p-point DFT, W_p^r = W_n^(r n / p) and n / p = s m.
template <class V, class T>
CBS_FFT_INL void stage_prime(const V* ar, const V* ai, V* br, V* bi, int s, int m, int p, const T* wr, const T* wi) {
    const int sm = s * m;
    for (int j = 0; j < m; ++j)
        for (int q = 0; q < s; ++q) {
            const int a = q + s * j, b = q + p * s * j;
            for (int k = 0; k < p; ++k) {
                Cx<V> acc = load(ar, ai, a);
                for (int r = 1; r < p; ++r) {
                    const int w = static_cast<int>((int64_t{r} * k) % p) * sm;
                    acc = acc + mul(load(ar, ai, a + r * sm), wr[w], wi[w]);
                }
                const int t = k * j * s;
                store(br, bi, b + k * s, k == 0 ? acc : mul(acc, wr[t], wi[t]));
            }
        }
}

}  // namespace fft_detail

template <class T>
class FftPlan {
public:
    FftPlan() = default;
    explicit FftPlan(int n);  // n >= 1, else EngineError
    int size() const { return n_; }
    // exp(-2 pi i m / n) = w_re(m) + i w_im(m), m < n (exact at multiples of n / 4).
    T w_re(int m) const { return w_re_[m]; }
    T w_im(int m) const { return w_im_[m]; }

    // Forward DFT Y[k] = sum_j x[j] exp(-2 pi i k j / n) of x = xr + i xi into y = yr + i yi,
    // through the scratch sr, si; every array holds n values, x is left as it was, and no
    // two arrays may overlap.
    template <class V>
    CBS_FFT_INL void forward(const V* xr, const V* xi, V* yr, V* yi, V* sr, V* si) const;
    // The unscaled inverse, sum_j x[j] exp(+2 pi i k j / n): swapping real and imaginary
    // parts conjugates times i, so it is the forward transform with them swapped in and out.
    template <class V>
    CBS_FFT_INL void inverse(const V* xr, const V* xi, V* yr, V* yi, V* sr, V* si) const {
        forward(xi, xr, yi, yr, si, sr);
    }

private:
    int n_ = 0;
    std::vector<int> radices_;
    std::vector<T> w_re_, w_im_;
};

extern template class FftPlan<float>;
extern template class FftPlan<double>;

// Stockham autosort, decimation in frequency: the stage of radix p at sub-length L = n / s
// (s = product of the radices already applied, m = L / p) maps
//   y[q + s (p j + k)] = W_L^(j k) * sum_r x[q + s (j + r m)] W_p^(r k)
// for j < m, q < s, k < p; the output comes out in natural order, no bit reversal. Each
// stage reads one buffer and writes another: the first reads x, and the stages alternate
// between s and y so that the last one writes y.
template <class T>
template <class V>
CBS_FFT_INL void FftPlan<T>::forward(const V* xr, const V* xi, V* yr, V* yi, V* sr, V* si) const {
    const int stages = static_cast<int>(radices_.size());
    if (stages == 0) {  // n = 1
        yr[0] = xr[0];
        yi[0] = xi[0];
        return;
    }
    const T* wr = w_re_.data();
    const T* wi = w_im_.data();
    for (int st = 0, s = 1; st < stages; ++st) {
        const int p = radices_[st], m = n_ / (s * p);
        const bool to_y = (stages - 1 - st) % 2 == 0;
        const V* ar = st == 0 ? xr : to_y ? sr : yr;
        const V* ai = st == 0 ? xi : to_y ? si : yi;
        V* br = to_y ? yr : sr;
        V* bi = to_y ? yi : si;
        switch (p) {
            case 4: fft_detail::stage4(ar, ai, br, bi, s, m, wr, wi); break;
            case 2: fft_detail::stage2(ar, ai, br, bi, s, m, wr, wi); break;
            case 3: fft_detail::stage3(ar, ai, br, bi, s, m, wr, wi); break;
            case 5: fft_detail::stage5(ar, ai, br, bi, s, m, wr, wi); break;
            default: fft_detail::stage_prime(ar, ai, br, bi, s, m, p, wr, wi);
        }
        s *= p;
    }
}

// The onesided power spectrum |X[k]|^2, k = 0..n/2, of real frames of even length n.
class RealFft {
public:
    RealFft() = default;
    explicit RealFft(int n);  // n even, >= 2, else EngineError
    int size() const { return n_; }
    int n_bins() const { return n_ / 2 + 1; }
    // frame: n values; power: n/2 + 1 values; scratch: scratch_size() values.
    void power(const double* frame, double* power, double* scratch) const;
    size_t scratch_size() const { return 3 * static_cast<size_t>(n_); }

private:
    int n_ = 0;
    FftPlan<double> half_;
    std::vector<double> w_re_, w_im_;  // exp(-2 pi i k / n), k <= n/2
};

// frame[k] = x[start + k] * window[k] for k < window.size(), indexing x with reflection at
// both ends (numpy/torch "reflect" padding: the edge sample is not repeated).
void reflect_windowed_frame(const float* x, int64_t n, int64_t start, const std::vector<float>& window,
                            double* frame);

}  // namespace cbs
