/* The neuron index's running statistics of one block of unit values, in one pass over the block. Built with the package
 * (setup.py) into the extension module gptviz.index._block_stats, whose boundary (block_stats_module.c) checks every
 * size and index below before calling this; gptviz/index/native.py falls back to torch ops where it is not built.
 *
 * values: n rows (tokens) of w units, row i at values + r * stride, r = row_index[i] (i where row_index is NULL: the
 * scored rows can be read where the forward pass left them). For each unit u of the block:
 *   vmin[u], vmax[u]  running minimum and maximum;
 *   vsq[u]            running sum of squares, in double;
 *   token_sums        row slots[i] gains row i (token_sums + slots[i] * ts_stride, w floats), added in row order: the
 *                     same float additions, in the same order, as torch's index_add_ of the rows;
 *   counts            the histograms, [w, bins] int64: bin = zero_bin[u] - 1 + c, where c = ceil(v * inv_width[u])
 *                     clamped to [lo[u], hi[u]] = [1 - zero_bin[u], bins - zero_bin[u]], and at least 1 when v > 0
 *                     (a value's side of the 0 edge follows its sign alone): histograms.py's _Binner rule, bit for bit.
 *                     Counted first in `local` ([bins, w] int32, bin-major: the units of a row mostly share a few bins,
 *                     so their counters share cache lines), then added into counts;
 *   top k             best_v, best_loc [w, K]: each unit's K entries in the index's total order (value descending,
 *                     then location ascending; empty slots, location -1, last), thr[u] = best_v[u][K - 1]. A value
 *                     above thr[u], or any value while the unit has an empty slot, is inserted after the entries at
 *                     or above it. That is the top-k merge of the entries and the block's values where the caller has
 *                     checked that every entry's location comes before every row's and that the rows' locations
 *                     `loc` increase, and says so with top = 1 (2: some unit has an empty slot, so every value is
 *                     tested); elsewhere it passes top = 0 (nothing inserted) and merges with vmax itself (top_k.py).
 *   sample            samp_key, samp_v, samp_loc [w, R] (R > 0): each unit's sample of its values > 0, the R with the
 *                     smallest row key (row_key[i], one per row, distinct) in key order, empty slots (location -1)
 *                     last: gptviz/index/bands.py. A value joins when it is > 0 and its key is at most sthr[u] (the
 *                     last held key when the sample is full, else INT64_MAX), inserted after the smaller keys. Its set
 *                     does not depend on the order the rows come in, so this runs whatever `top` says. Per tile, the
 *                     rows are put in key order once; a unit with no value > 0 in the tile (its tile maximum) or whose
 *                     threshold is under the tile's smallest key is skipped without reading its values again, and the
 *                     others read the tile's rows in key order only up to their threshold. (A max-heap instead of
 *                     slots in key order measured no faster: an insertion's cost is mostly reaching the unit's
 *                     sample in memory, not moving its entries.)
 * Returns the number of values inserted into the top k. A NaN value bins at lo[u] (never outside the unit's bins) and
 * turns vsq[u] into NaN, which the caller checks. The pointers do not overlap; local holds bins * w ints, scratch w
 * ints, tile_max w floats and sthr w int64. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "block_stats.h"

/* Rows are taken in tiles of TILE: the top k is tested once per tile against each unit's maximum over the tile, and
 * only a unit whose tile maximum passes its threshold has the tile's rows read again (from the cache), in row order,
 * so each unit still takes its values in row order. In most rows some unit of a block takes a value, so testing row
 * by row walked every unit of most rows twice (that took about 5% longer on the bundled model). */
#define TILE 32

/* x86-64 with GCC on Linux: one copy of the pass per vector width, the widest this CPU has chosen when the module
 * loads (an ifunc), so that a portable build runs at about the speed of -march=native. Elsewhere one portable copy.
 * (On the definition, not the header's declaration: GCC builds the clones and their resolver where it is defined.) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GPTVIZ_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPTVIZ_VECTOR_CLONES
#endif

GPTVIZ_VECTOR_CLONES
int64_t gptviz_block_stats(const float *restrict values, const int64_t *restrict row_index, int64_t n, int64_t w,
                           int64_t stride,
                           const int64_t *restrict slots, float *restrict token_sums, int64_t ts_stride,
                           const float *restrict inv_width, const float *restrict lo, const float *restrict hi,
                           const int32_t *restrict zero_bin, int64_t bins, int64_t *restrict counts,
                           float *restrict vmin, float *restrict vmax, double *restrict vsq,
                           float *restrict thr, float *restrict best_v, int64_t *restrict best_loc,
                           const int64_t *restrict loc, int64_t K, int64_t top, int32_t *restrict local,
                           int32_t *restrict scratch, float *restrict tile_max,
                           const int64_t *restrict row_key, int64_t R, int64_t *restrict sthr,
                           int64_t *restrict samp_key, float *restrict samp_v, int64_t *restrict samp_loc)
{
    int64_t inserted = 0;
    int64_t order[TILE];
    memset(local, 0, (size_t)(bins * w) * sizeof(int32_t));
    for (int64_t u = 0; u < w && R > 0; u++)
        sthr[u] = samp_loc[u * R + R - 1] < 0 ? INT64_MAX : samp_key[u * R + R - 1];
    for (int64_t i0 = 0; i0 < n; i0 += TILE) {
        int64_t i1 = i0 + TILE < n ? i0 + TILE : n;
        for (int64_t u = 0; u < w; u++)
            tile_max[u] = -INFINITY;
        for (int64_t i = i0; i < i1; i++) {
            const float *restrict row = values + (row_index ? row_index[i] : i) * stride;
            float *restrict sums = token_sums + slots[i] * ts_stride;
            /* two inner loops, each vectorised by the compiler; then the scatter into the counts */
            for (int64_t u = 0; u < w; u++) {
                float v = row[u];
                vmin[u] = v < vmin[u] ? v : vmin[u];
                vmax[u] = v > vmax[u] ? v : vmax[u];
                tile_max[u] = v > tile_max[u] ? v : tile_max[u];
                vsq[u] += (double)v * (double)v;
                sums[u] += v;
            }
            for (int64_t u = 0; u < w; u++) {
                float v = row[u];
                float x = v * inv_width[u];
                x = x >= lo[u] ? x : lo[u];  /* written so that NaN takes the lower bound */
                x = x <= hi[u] ? x : hi[u];
                int32_t c = (int32_t)x;      /* x is within [lo, hi]: ceil by truncation, then up one if below */
                c += (float)c < x ? 1 : 0;
                c = (v > 0.0f) & (c < 1) ? 1 : c;
                scratch[u] = (c + zero_bin[u] - 1) * (int32_t)w + (int32_t)u;
            }
            for (int64_t u = 0; u < w; u++)
                local[scratch[u]] += 1;
        }
        if (R > 0) {
            int64_t m = i1 - i0;
            for (int64_t a = 0; a < m; a++) {  /* the tile's rows in key order: an insertion sort of TILE at most */
                int64_t k = row_key[i0 + a], b = a;
                for (; b > 0 && row_key[i0 + order[b - 1]] > k; b--)
                    order[b] = order[b - 1];
                order[b] = a;
            }
            int64_t kmin = row_key[i0 + order[0]];
            for (int64_t u = 0; u < w; u++) {
                if (!(tile_max[u] > 0.0f && kmin <= sthr[u]))
                    continue;
                int64_t *restrict sk = samp_key + u * R, *restrict sl = samp_loc + u * R;
                float *restrict sv = samp_v + u * R;
                for (int64_t a = 0; a < m; a++) {
                    int64_t i = i0 + order[a], k = row_key[i];
                    if (k > sthr[u])
                        break;
                    float v = values[(row_index ? row_index[i] : i) * stride + u];
                    if (!(v > 0.0f))
                        continue;
                    int64_t j = R - 1;
                    for (; j > 0 && (sl[j - 1] < 0 || sk[j - 1] > k); j--) {
                        sk[j] = sk[j - 1];
                        sv[j] = sv[j - 1];
                        sl[j] = sl[j - 1];
                    }
                    sk[j] = k;
                    sv[j] = v;
                    sl[j] = loc[i];
                    sthr[u] = sl[R - 1] < 0 ? INT64_MAX : sk[R - 1];
                }
            }
        }
        if (top == 0)
            continue;
        for (int64_t u = 0; u < w; u++) {
            float *restrict bv = best_v + u * K;
            int64_t *restrict bl = best_loc + u * K;
            if (!(tile_max[u] > thr[u] || (top == 2 && bl[K - 1] < 0)))
                continue;  /* (vectorised by the compiler into a mask test, mostly) */
            for (int64_t i = i0; i < i1; i++) {
                float v = values[(row_index ? row_index[i] : i) * stride + u];
                if (v > thr[u] || (top == 2 && bl[K - 1] < 0)) {
                    int64_t j = K - 1;
                    for (; j > 0 && (bl[j - 1] < 0 || bv[j - 1] < v); j--) {
                        bv[j] = bv[j - 1];
                        bl[j] = bl[j - 1];
                    }
                    bv[j] = v;
                    bl[j] = loc[i];
                    thr[u] = bv[K - 1];  /* -inf while a slot is empty */
                    inserted++;
                }
            }
        }
    }
    for (int64_t u = 0; u < w; u++)
        for (int64_t b = 0; b < bins; b++)
            counts[u * bins + b] += local[b * w + u];
    return inserted;
}
