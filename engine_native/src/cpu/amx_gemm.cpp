#include "cpu/amx_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CBS_AMX_X86 1
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace cbs {

namespace {

constexpr int64_t kTileRows = 16;   // rows of A (and C) per tile, rows of B per packed block
constexpr int64_t kTileK = 32;      // bf16 values of k per tile row
constexpr int64_t kTileElems = 512; // bf16 values per tile (16 x 32)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

#ifdef CBS_AMX_X86

namespace {

// The bf16 nearest to each of 16 floats (round to nearest even, as AVX512-BF16's convert).
AMX_TARGET inline __m256i to_bf16(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }
AMX_TARGET inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// 16 floats as high and low bf16 parts: hi the nearest bf16, lo the nearest to the rest.
AMX_TARGET inline void split_vec(__m512 v, __m256i& hi, __m256i& lo) {
    hi = to_bf16(v);
    lo = to_bf16(_mm512_sub_ps(v, from_bf16(hi)));
}

// The same for 16 floats at x (fewer under `mask`, the rest zero), times `scale` if given.
AMX_TARGET inline void split16(const float* x, __mmask16 mask, __m256i& hi, __m256i& lo) {
    split_vec(_mm512_maskz_loadu_ps(mask, x), hi, lo);
}
AMX_TARGET inline void split16(const float* x, __mmask16 mask, __m512 scale, __m256i& hi, __m256i& lo) {
    split_vec(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x), scale), hi, lo);
}

// 32 floats, a then b, as 32 high and 32 low parts in that order: one conversion of two
// vectors for each part, where split_vec takes two a vector.
AMX_TARGET inline void split32(__m512 a, __m512 b, __m512i& hi, __m512i& lo) {
    hi = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
    const __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hi)), 16));
    const __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hi, 1)), 16));
    lo = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)));
}

AMX_TARGET inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

struct TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Eight tiles of 16 rows x 64 bytes: C00 C01 C10 C11 (0-3), A high/low (4, 5), B high/low (6, 7).
AMX_TARGET void configure_tiles() {
    TileConfig c;
    for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = 16;
    _tile_loadconfig(&c);
}

// A tile of C stored at `out` (ldc floats), only its first `rows` x `cols` where it hangs over.
#define CBS_STORE_TILE(t, out, ldc, rows, cols)                                               \
    do {                                                                                      \
        if ((rows) == 16 && (cols) == 16) {                                                   \
            _tile_stored(t, out, (ldc) * static_cast<int64_t>(sizeof(float)));               \
        } else {                                                                              \
            alignas(64) float tmp_[256];                                                      \
            _tile_stored(t, tmp_, 64);                                                        \
            for (int64_t r_ = 0; r_ < (rows); ++r_)                                           \
                std::memcpy((out) + r_ * (ldc), tmp_ + r_ * 16, sizeof(float) * (cols));      \
        }                                                                                     \
    } while (0)

// The same tile loaded from `out` (a later run over k adds to it).
#define CBS_LOAD_TILE(t, out, ldc, rows, cols)                                                \
    do {                                                                                      \
        if ((rows) == 16 && (cols) == 16) {                                                   \
            _tile_loadd(t, out, (ldc) * static_cast<int64_t>(sizeof(float)));                \
        } else {                                                                              \
            alignas(64) float tmp_[256] = {};                                                 \
            for (int64_t r_ = 0; r_ < (rows); ++r_)                                           \
                std::memcpy(tmp_ + r_ * 16, (out) + r_ * (ldc), sizeof(float) * (cols));      \
            _tile_loadd(t, tmp_, 64);                                                         \
        }                                                                                     \
    } while (0)

// C for up to 2 x 2 tiles (RM row blocks of A from ib, RN row blocks of B from jb). Per k
// block three rounds, hi.hi, hi.lo, lo.hi, each one product into every C tile: consecutive
// products go to different accumulators (a tile product's latency is about three times its
// issue interval, so one accumulator fed three times in a row runs at a third of the rate).
// Tiles: C 0-3, A 4-5 (row blocks 0, 1), B 6-7 (row blocks 0, 1); each round keeps one
// operand of the last (hi.lo, hi.hi, lo.hi): 8 tile loads for 12 products.
template <int RM, int RN, class ATiles>
AMX_TARGET void tile_block(const ATiles& a, int64_t ib, const AmxPackedB& b, int64_t jb, int64_t kb0, int64_t kb1,
                           float* C, int64_t ldc, int64_t rows_valid, int64_t cols_valid) {
    const int64_t r0 = std::min<int64_t>(16, rows_valid), r1 = std::min<int64_t>(16, rows_valid - 16);
    const int64_t c0 = std::min<int64_t>(16, cols_valid), c1 = std::min<int64_t>(16, cols_valid - 16);
    if (kb0 == 0) {
        _tile_zero(0);
        if (RN > 1) _tile_zero(1);
        if (RM > 1) _tile_zero(2);
        if (RM > 1 && RN > 1) _tile_zero(3);
    } else {
        CBS_LOAD_TILE(0, C, ldc, r0, c0);
        if (RN > 1) CBS_LOAD_TILE(1, C + 16, ldc, r0, c1);
        if (RM > 1) CBS_LOAD_TILE(2, C + 16 * ldc, ldc, r1, c0);
        if (RM > 1 && RN > 1) CBS_LOAD_TILE(3, C + 16 * ldc + 16, ldc, r1, c1);
    }
    for (int64_t kb = kb0; kb < kb1; ++kb) {
        const uint16_t *a0 = a.hi(ib, kb), *b0 = b.block(jb, kb);
        const uint16_t *a1 = RM > 1 ? a.hi(ib + 1, kb) : a0, *b1 = RN > 1 ? b.block(jb + 1, kb) : b0;
        const int64_t as = a.stride;
#define CBS_ROUND()                                      \
    _tile_dpbf16ps(0, 4, 6);                             \
    if (RN > 1) _tile_dpbf16ps(1, 4, 7);                 \
    if (RM > 1) _tile_dpbf16ps(2, 5, 6);                 \
    if (RM > 1 && RN > 1) _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(4, a0, as);  // A high x B low
        if (RM > 1) _tile_loadd(5, a1, as);
        _tile_loadd(6, b0 + kTileElems, 64);
        if (RN > 1) _tile_loadd(7, b1 + kTileElems, 64);
        CBS_ROUND();
        _tile_loadd(6, b0, 64);  // A high x B high
        if (RN > 1) _tile_loadd(7, b1, 64);
        CBS_ROUND();
        _tile_loadd(4, a.lo(ib, kb), as);  // A low x B high
        if (RM > 1) _tile_loadd(5, a.lo(ib + 1, kb), as);
        CBS_ROUND();
#undef CBS_ROUND
    }
    CBS_STORE_TILE(0, C, ldc, r0, c0);
    if (RN > 1) CBS_STORE_TILE(1, C + 16, ldc, r0, c1);
    if (RM > 1) CBS_STORE_TILE(2, C + 16 * ldc, ldc, r1, c0);
    if (RM > 1 && RN > 1) CBS_STORE_TILE(3, C + 16 * ldc + 16, ldc, r1, c1);
}

// Loop nest: panels of B rows (their packed tiles stay in L2 while every row tile of A passes
// over them), and within a panel runs of k blocks. C is stored after each run and loaded again
// for the next: runs of 32 blocks (1024 values of k, all of S3Gen's), as storing and loading
// C between shorter runs (a pair of A's row tiles in L1 through a run) costs more than reading
// those tiles from L2 (docs/CPU_MULTILINGUAL.md).
constexpr int64_t kBlocksPerPanel = 16;  // 256 rows of B
int64_t g_k_run = 32;                    // k blocks per run

// A's tiles where AmxSplitA keeps them: 1 KiB each, high then low part.
struct SplitTiles {
    const AmxSplitA& a;
    static constexpr int64_t stride = 64;  // bytes from one tile row to the next
    const uint16_t* hi(int64_t ib, int64_t kb) const { return a.block(ib, kb); }
    const uint16_t* lo(int64_t ib, int64_t kb) const { return a.block(ib, kb) + kTileElems; }
};

// A's tiles read in place from a signal's frames (AmxSplitFrames): row i of A is the frames
// i + tap * tap_step side by side, so k block kb is 32 channels of one tap's frames, 16 rows
// one frame apart.
struct FrameTiles {
    const uint16_t *h, *l;
    int64_t channels, tap_step, stride;
    int64_t offset(int64_t ib, int64_t kb) const {
        const int64_t k0 = kb * kTileK;
        return (ib * kTileRows + k0 / channels * tap_step) * channels + k0 % channels;
    }
    const uint16_t* hi(int64_t ib, int64_t kb) const { return h + offset(ib, kb); }
    const uint16_t* lo(int64_t ib, int64_t kb) const { return l + offset(ib, kb); }
};

// C's m rows times B's row blocks [j0, j1), column 0 at row 16 j0 of B.
template <class ATiles>
AMX_TARGET void gemm(const ATiles& a, int64_t m, const AmxPackedB& b, float* C, int64_t ldc, int64_t j0, int64_t j1) {
    configure_tiles();
    const int64_t n = b.rows(), nk = b.k_blocks(), k_run = g_k_run;
    const int64_t mt = (m + kTileRows - 1) / kTileRows, nb = j1;
    for (int64_t jp = j0; jp < nb; jp += kBlocksPerPanel) {
        const int64_t jend = std::min(nb, jp + kBlocksPerPanel);
        for (int64_t kb0 = 0; kb0 < nk; kb0 += k_run) {
            const int64_t kb1 = std::min(nk, kb0 + k_run);
            for (int64_t it = 0; it < mt; it += 2) {
                const int64_t rows = std::min<int64_t>(32, m - it * kTileRows);
                for (int64_t jb = jp; jb < jend; jb += 2) {
                    const int64_t cols = std::min<int64_t>(32, n - jb * kTileRows);
                    float* out = C + it * kTileRows * ldc + (jb - j0) * kTileRows;
                    const bool two_rows = it + 1 < mt, two_cols = jb + 1 < jend;
                    if (two_rows && two_cols) tile_block<2, 2>(a, it, b, jb, kb0, kb1, out, ldc, rows, cols);
                    else if (two_rows) tile_block<2, 1>(a, it, b, jb, kb0, kb1, out, ldc, rows, cols);
                    else if (two_cols) tile_block<1, 2>(a, it, b, jb, kb0, kb1, out, ldc, rows, cols);
                    else tile_block<1, 1>(a, it, b, jb, kb0, kb1, out, ldc, rows, cols);
                }
            }
        }
    }
    _tile_release();
}

// A 16 x 16 matrix of 32-bit words, one row per register, transposed in place.
AMX_TARGET void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_i32x4(u[i], u[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(u[i], u[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(u[i + 8], u[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(u[i + 8], u[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; ++i) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

// One 16-row block of B's rows (fewer at the end: zero rows) into its packed tiles: row c's
// k values 2r, 2r+1 are 32-bit word r * 16 + c of the block's tile, for high and low parts
// (the rows' split words, 16 per row and k block, transposed). `load(c, kb, k0, lo16, hi16)`
// gives row c's 32 values from k0 (zeros past k).
template <class Load>
AMX_TARGET void pack_block(const Load& load, int64_t n_rows, int64_t k_blocks, uint16_t* out) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
        __m512i hi[16], lo[16];
        const int64_t k0 = kb * kTileK;
        for (int64_t c = 0; c < kTileRows; ++c) {
            __m256i h0 = _mm256_setzero_si256(), l0 = h0, h1 = h0, l1 = h0;
            if (c < n_rows) {
                __m512 v0, v1;
                load(c, kb, k0, v0, v1);
                split_vec(v0, h0, l0);
                split_vec(v1, h1, l1);
            }
            hi[c] = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
            lo[c] = _mm512_inserti64x4(_mm512_castsi256_si512(l0), l1, 1);
        }
        transpose16(hi);
        transpose16(lo);
        uint16_t* tile = out + kb * 2 * kTileElems;
        for (int r = 0; r < 16; ++r) {
            _mm512_storeu_si512(tile + r * 32, hi[r]);
            _mm512_storeu_si512(tile + kTileElems + r * 32, lo[r]);
        }
    }
}

// The same block from B's transpose: k values 2r and 2r+1 of the block's 16 rows are two
// rows of `cols` (16 floats each, fewer at the end), split and interleaved into tile row r.
AMX_TARGET void pack_block_transposed(const float* cols, int64_t ld, int64_t n_rows, int64_t k, int64_t k_blocks,
                                      uint16_t* out) {
    const __mmask16 lanes = first_lanes(n_rows);
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
        uint16_t* hi = out + kb * 2 * kTileElems;
        uint16_t* lo = hi + kTileElems;
        for (int64_t r = 0; r < 16; ++r) {
            const int64_t i0 = kb * kTileK + 2 * r;
            __m256i h0 = _mm256_setzero_si256(), l0 = h0, h1 = h0, l1 = h0;
            if (i0 < k) split16(cols + i0 * ld, lanes, h0, l0);
            if (i0 + 1 < k) split16(cols + (i0 + 1) * ld, lanes, h1, l1);
            const __m512i hw = _mm512_or_si512(_mm512_cvtepu16_epi32(h0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
            const __m512i lw = _mm512_or_si512(_mm512_cvtepu16_epi32(l0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(l1), 16));
            _mm512_storeu_si512(hi + r * 32, hw);
            _mm512_storeu_si512(lo + r * 32, lw);
        }
    }
}

// 16 rows of A (fewer at the end: zero rows) into its blocked high and low tiles.
AMX_TARGET void split_block(const float* rows, int64_t ld, int64_t n_rows, int64_t k, int64_t k_blocks, float scale,
                            uint16_t* out) {
    const __m512 s = _mm512_set1_ps(scale);
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
        uint16_t* hi = out + kb * 2 * kTileElems;
        uint16_t* lo = hi + kTileElems;
        const int64_t k0 = kb * kTileK;
        const __mmask16 m0 = first_lanes(std::max<int64_t>(0, k - k0)), m1 = first_lanes(std::max<int64_t>(0, k - k0 - 16));
        for (int64_t r = 0; r < kTileRows; ++r) {
            __m512 a = _mm512_setzero_ps(), b = a;
            if (r < n_rows) {
                a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, rows + r * ld + k0), s);
                b = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, rows + r * ld + k0 + 16), s);
            }
            __m512i vh, vl;
            split32(a, b, vh, vl);
            _mm512_storeu_si512(hi + r * kTileK, vh);
            _mm512_storeu_si512(lo + r * kTileK, vl);
        }
    }
}

bool cpu_has_amx_bf16() {
    __builtin_cpu_init();
    unsigned eax, ebx, ecx, edx;
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw")) return false;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
    const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
    return amx_bf16 && amx_tile;
}

// Linux hands the tile state to a process only when asked (ARCH_REQ_XCOMP_PERM for
// XTILEDATA); without it the first tile instruction faults.
bool request_tile_state() {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool amx_available() {
    static const bool ok = [] {
        const char* v = std::getenv("CBS_AMX");
        if (v && std::strcmp(v, "0") == 0) return false;
        return cpu_has_amx_bf16() && request_tile_state();
    }();
    return ok;
}

void AmxPackedB::pack(const float* rows, int64_t ld, int64_t n, int64_t k) {
    n_ = n, k_ = k, k_blocks_ = round_up(k, kTileK) / kTileK;
    const int64_t blocks = (n + kTileRows - 1) / kTileRows;
    uint16_t* out = data_.resize(static_cast<size_t>(blocks * k_blocks_ * 2 * kTileElems));
    for (int64_t rb = 0; rb < blocks; ++rb) {
        const float* block_rows = rows + rb * kTileRows * ld;
        auto load = [&](int64_t c, int64_t, int64_t k0, __m512& v0, __m512& v1) AMX_TARGET {
            v0 = _mm512_maskz_loadu_ps(first_lanes(k - k0), block_rows + c * ld + k0);
            v1 = _mm512_maskz_loadu_ps(first_lanes(std::max<int64_t>(0, k - k0 - 16)), block_rows + c * ld + k0 + 16);
        };
        pack_block(load, std::min(kTileRows, n - rb * kTileRows), k_blocks_, out + rb * k_blocks_ * 2 * kTileElems);
    }
}

void AmxPackedB::pack(RowBlock block, const void* src, int64_t first, int64_t n, int64_t k) {
    n_ = n, k_ = k, k_blocks_ = round_up(k, kTileK) / kTileK;
    const int64_t blocks = (n + kTileRows - 1) / kTileRows;
    uint16_t* out = data_.resize(static_cast<size_t>(blocks * k_blocks_ * 2 * kTileElems));
    for (int64_t rb = 0; rb < blocks; ++rb) {
        const int64_t row0 = first + rb * kTileRows;
        auto load = [&](int64_t c, int64_t kb, int64_t, __m512& v0, __m512& v1) AMX_TARGET {
            alignas(64) float values[kTileK];
            block(src, row0 + c, kb, values);
            v0 = _mm512_load_ps(values);
            v1 = _mm512_load_ps(values + 16);
        };
        pack_block(load, std::min(kTileRows, n - rb * kTileRows), k_blocks_, out + rb * k_blocks_ * 2 * kTileElems);
    }
}

void AmxPackedB::pack_transposed(const float* cols, int64_t ld, int64_t n, int64_t k) {
    n_ = n, k_ = k, k_blocks_ = round_up(k, kTileK) / kTileK;
    const int64_t blocks = (n + kTileRows - 1) / kTileRows;
    uint16_t* out = data_.resize(static_cast<size_t>(blocks * k_blocks_ * 2 * kTileElems));
    for (int64_t rb = 0; rb < blocks; ++rb)
        pack_block_transposed(cols + rb * kTileRows, ld, std::min(kTileRows, n - rb * kTileRows), k, k_blocks_,
                              out + rb * k_blocks_ * 2 * kTileElems);
}

size_t AmxSplitA::bytes(int64_t m, int64_t k) {
    return static_cast<size_t>((m + kTileRows - 1) / kTileRows * (round_up(k, kTileK) / kTileK) * 2 * kTileElems) *
               sizeof(uint16_t) +
           kCacheLine;
}

void AmxSplitA::view(void* storage, int64_t m, int64_t k) {
    m_ = m, k_ = k, k_blocks_ = round_up(k, kTileK) / kTileK;
    data_ = static_cast<uint16_t*>(align_to_line(storage));
}

void AmxSplitA::split_blocks(const float* rows, int64_t ld, int64_t rb0, int64_t rb1, float scale) {
    for (int64_t rb = rb0; rb < rb1; ++rb)
        split_block(rows + rb * kTileRows * ld, ld, std::min(kTileRows, m_ - rb * kTileRows), k_, k_blocks_, scale,
                    data_ + rb * k_blocks_ * 2 * kTileElems);
}

void AmxSplitA::split(const float* rows, int64_t ld, int64_t m, int64_t k, float scale) {
    view(own_.resize(bytes(m, k)), m, k);
    split_blocks(rows, ld, 0, row_blocks(), scale);
}

void amx_gemm(const AmxSplitA& a, const AmxPackedB& b, float* C, int64_t ldc) {
    if (a.rows() > 0 && b.rows() > 0) gemm(SplitTiles{a}, a.rows(), b, C, ldc, 0, (b.rows() + kTileRows - 1) / kTileRows);
}

void amx_gemm_blocks(const AmxSplitA& a, const AmxPackedB& b, int64_t first_block, int64_t end_block, float* C,
                     int64_t ldc) {
    end_block = std::min(end_block, (b.rows() + kTileRows - 1) / kTileRows);
    if (a.rows() > 0 && first_block >= 0 && first_block < end_block)
        gemm(SplitTiles{a}, a.rows(), b, C, ldc, first_block, end_block);
}

AMX_TARGET void AmxSplitFrames::split(const float* frames, int64_t ld, int64_t n, int64_t rows, int64_t channels) {
    channels_ = channels, rows_ = rows;
    const size_t size = static_cast<size_t>(rows * channels);
    uint16_t* h = hi_.resize(size);
    uint16_t* l = lo_.resize(size);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < channels; c += 32) {  // channels: a multiple of 32
            __m512 a = _mm512_setzero_ps(), b = a;
            if (r < n) a = _mm512_loadu_ps(frames + r * ld + c), b = _mm512_loadu_ps(frames + r * ld + c + 16);
            __m512i vh, vl;
            split32(a, b, vh, vl);
            _mm512_storeu_si512(h + r * channels + c, vh);
            _mm512_storeu_si512(l + r * channels + c, vl);
        }
}

void amx_conv(const AmxSplitFrames& x, int64_t m, int64_t tap_step, const AmxPackedB& b, float* C, int64_t ldc) {
    const int64_t channels = x.channels();
    if (m <= 0 || b.rows() <= 0 || channels % kTileK != 0 || b.k() % channels != 0 ||
        round_up(m, kTileRows) + (b.k() / channels - 1) * tap_step > x.rows())
        std::abort();  // a caller's bug: the shapes are the graph's, checked where it is built
    const FrameTiles tiles{x.hi(), x.lo(), channels, tap_step, channels * static_cast<int64_t>(sizeof(uint16_t))};
    gemm(tiles, m, b, C, ldc, 0, (b.rows() + kTileRows - 1) / kTileRows);
}

void amx_set_k_run(int64_t k_blocks) { g_k_run = k_blocks; }

#else  // not x86-64 Linux with GCC/Clang: never available, never called

bool amx_available() { return false; }
void AmxPackedB::pack(const float*, int64_t, int64_t, int64_t) { std::abort(); }
void AmxPackedB::pack(RowBlock, const void*, int64_t, int64_t, int64_t) { std::abort(); }
void AmxPackedB::pack_transposed(const float*, int64_t, int64_t, int64_t) { std::abort(); }
size_t AmxSplitA::bytes(int64_t, int64_t) { return 0; }
void AmxSplitA::view(void*, int64_t, int64_t) { std::abort(); }
void AmxSplitA::split_blocks(const float*, int64_t, int64_t, int64_t, float) { std::abort(); }
void AmxSplitA::split(const float*, int64_t, int64_t, int64_t, float) { std::abort(); }
void amx_gemm(const AmxSplitA&, const AmxPackedB&, float*, int64_t) { std::abort(); }
void amx_gemm_blocks(const AmxSplitA&, const AmxPackedB&, int64_t, int64_t, float*, int64_t) { std::abort(); }
void AmxSplitFrames::split(const float*, int64_t, int64_t, int64_t, int64_t) { std::abort(); }
void amx_conv(const AmxSplitFrames&, int64_t, int64_t, const AmxPackedB&, float*, int64_t) { std::abort(); }

#endif

}  // namespace cbs
