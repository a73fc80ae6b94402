// The power-of-two complex FFT of HiFT's convolution kernels: in place over arrays of
// SIMD vectors (8 channels per vector, real and imaginary parts apart), given in
// bit-reversed order, with float twiddle tables per size. The engine's general
// transform (any length, double precision) is FftPlan in core/fft.h.
#pragma once

#include <cmath>
#include <vector>

namespace cbs {

#ifndef CBS_INL
#define CBS_INL __attribute__((always_inline)) inline
#endif

// cos/sin(2 pi m / N), m < N, exact at multiples of N/4; and the bit reversal of log2 N bits.
struct FftTables {
    std::vector<float> cos, sin;
    std::vector<int> rev;
    explicit FftTables(int N) : cos(N), sin(N), rev(N) {
        for (int m = 0; m < N; ++m) {
            const double a = 2.0 * M_PI * m / N;
            cos[m] = (4 * m) % N == 0 ? static_cast<float>(m == 0 ? 1 : 4 * m == 2 * N ? -1 : 0) : static_cast<float>(std::cos(a));
            sin[m] = (4 * m) % N == 0 ? static_cast<float>(4 * m == N ? 1 : 4 * m == 3 * N ? -1 : 0) : static_cast<float>(std::sin(a));
            int r = 0;
            for (int bit = 1, rb = N >> 1; bit < N; bit <<= 1, rb >>= 1)
                if (m & bit) r |= rb;
            rev[m] = r;
        }
    }
};

inline const FftTables& fft_tables(int N) {
    static const FftTables t128(128), t64(64), t32(32), t16(16);
    switch (N) {
        case 128: return t128;
        case 64: return t64;
        case 32: return t32;
        default: return t16;
    }
}

// In-place complex FFT of N vectors given in bit-reversed order: the forward transform
// (exp(-2 pi i f n / N)) or, with inverse, the unscaled inverse. Radix-2 decimation in
// time with its stages taken two at a time (radix 2^2: the second stage's odd twiddles
// are the even ones times -i), so each pass over the data does two stages; a last
// radix-2 stage when log2 N is odd. The same arithmetic as plain radix-2.
template <class V>
CBS_INL void fft_vec(V* re, V* im, int N, const FftTables& t, bool inverse) {
    const float sg = inverse ? 1.0f : -1.0f;  // sign of the twiddles' sines
    int h = 1;
    for (; 4 * h <= N; h *= 4) {
        const int s1 = N / (2 * h), s2 = N / (4 * h);
        for (int i = 0; i < N; i += 4 * h)
            for (int j = 0; j < h; ++j) {
                V r0 = re[i + j], i0 = im[i + j], r1 = re[i + j + h], i1 = im[i + j + h];
                V r2 = re[i + j + 2 * h], i2 = im[i + j + 2 * h], r3 = re[i + j + 3 * h], i3 = im[i + j + 3 * h];
                if (j) {  // stage one: pairs (0, 1), (2, 3) with exp(-+2 pi i j / 2h)
                    const float wr = t.cos[j * s1], wi = sg * t.sin[j * s1];
                    V a = r1 * wr - i1 * wi, b = r1 * wi + i1 * wr;
                    r1 = a;
                    i1 = b;
                    a = r3 * wr - i3 * wi;
                    b = r3 * wi + i3 * wr;
                    r3 = a;
                    i3 = b;
                }
                V u0r = r0 + r1, u0i = i0 + i1, u1r = r0 - r1, u1i = i0 - i1;
                V u2r = r2 + r3, u2i = i2 + i3, u3r = r2 - r3, u3i = i2 - i3;
                if (j) {  // stage two: pairs (0, 2) with exp(-+2 pi i j / 4h), (1, 3) with that times -+i
                    const float wr = t.cos[j * s2], wi = sg * t.sin[j * s2];
                    V a = u2r * wr - u2i * wi, b = u2r * wi + u2i * wr;
                    u2r = a;
                    u2i = b;
                    a = u3r * wr - u3i * wi;
                    b = u3r * wi + u3i * wr;
                    u3r = a;
                    u3i = b;
                }
                const V v3r = inverse ? -u3i : u3i, v3i = inverse ? u3r : -u3r;
                re[i + j] = u0r + u2r;
                im[i + j] = u0i + u2i;
                re[i + j + 2 * h] = u0r - u2r;
                im[i + j + 2 * h] = u0i - u2i;
                re[i + j + h] = u1r + v3r;
                im[i + j + h] = u1i + v3i;
                re[i + j + 3 * h] = u1r - v3r;
                im[i + j + 3 * h] = u1i - v3i;
            }
    }
    if (h < N)  // the last radix-2 stage
        for (int j = 0; j < h; ++j) {
            const float wr = t.cos[j], wi = sg * t.sin[j];
            const V br = re[j + h], bi = im[j + h];
            const V vr = br * wr - bi * wi, vi = br * wi + bi * wr;
            const V ur = re[j], ui = im[j];
            re[j] = ur + vr;
            im[j] = ui + vi;
            re[j + h] = ur - vr;
            im[j + h] = ui - vi;
        }
}

}  // namespace cbs
