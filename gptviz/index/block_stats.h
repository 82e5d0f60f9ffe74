/* The one pass of block_stats.c, called only through block_stats_module.c, which checks its arguments. */
#ifndef GPTVIZ_BLOCK_STATS_H
#define GPTVIZ_BLOCK_STATS_H

#include <stdint.h>

#if defined(_MSC_VER) && !defined(restrict)
#define restrict __restrict
#endif

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
                           int64_t *restrict samp_key, float *restrict samp_v, int64_t *restrict samp_loc);

#endif
