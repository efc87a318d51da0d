// The recurrence's bfloat16 products on a packed kernel, as TensorFlow CPU kernels.
//
// Each step of psmm_tf/layers/lstm_recurrence_tf.py multiplies a few rows (the batch) by the
// same recurrent kernel: `h_{t-1} U` forward, `dz_t U^T` backward, `(B, H) x (H, 4H)` and
// `(B, 4H) x (4H, H)`, T times a call. oneDNN's bfloat16 product repacks its right operand into
// the pair-interleaved layout of the AVX512-BF16 dot product (VDPBF16PS) on every call, so at
// `medium` (B = 20) the step's product ran at half the rate of the step's large products
// (docs/results.md, "The recurrent products on a packed kernel"). Here the kernel is packed
// once per call of the recurrence (`PsmmPackBfloat16`) and each step's product reads it as it
// is (`PsmmPackedProduct`):
//
//   packed[j, p, c, e] = B[2p + e, 32 j + c]     (zero past B's rows or columns)
//   out[m, n] = bfloat16(sum_k a[m, k] B[k, n])  (float32 sums, rounded to nearest even once)
//
// with B = U (transpose = false) or U^T (transpose = true), j a block of 32 output columns and
// p a pair of rows of B. The sums are float32, as oneDNN's, in another order (pairs of k in
// turn), so the two differ by bfloat16 rounding. On CPUs without AVX512-BF16 the kernels are
// built with plain loops (the same numbers, slowly); psmm_tf uses them only where the CPU has
// the instructions.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "Eigen/Core"
#include "kernel_util.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace psmm_tf {
namespace {

using Bf16 = Eigen::bfloat16;

constexpr int64_t kBlockColumns = 32;  // output columns per block: two vectors of 16 floats
constexpr int kMaxRows = 12;           // rows per tile: 24 accumulators

// Block `block` of `packed` from B = b (rows, columns), or B = b^T with b (columns, rows).
void PackBlock(const uint16_t* b, int64_t rows, int64_t columns, bool transpose, int64_t block,
               int64_t pairs, uint16_t* packed) {
  uint16_t* out = packed + block * pairs * kBlockColumns * 2;
  const int64_t first_column = block * kBlockColumns;
  const int64_t width = std::min(kBlockColumns, columns - first_column);
  if (width < kBlockColumns || rows % 2) std::fill(out, out + pairs * kBlockColumns * 2, 0);
  const int64_t whole_pairs = rows / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    uint16_t* dst = out + p * kBlockColumns * 2;
    if (p == whole_pairs) {  // an odd row count: its last row paired with zero
      for (int64_t c = 0; c < width; ++c) {
        dst[2 * c] = transpose ? b[(first_column + c) * rows + 2 * p]
                               : b[2 * p * columns + first_column + c];
      }
    } else if (transpose) {
      // B[2p + e, n] = b[n, 2p + e]: the pair is adjacent in b's row n, one 32-bit word.
      const uint16_t* src = b + first_column * rows + 2 * p;
      for (int64_t c = 0; c < width; ++c) std::memcpy(dst + 2 * c, src + c * rows, 4);
    } else {
      const uint16_t* even = b + 2 * p * columns + first_column;
      const uint16_t* odd = even + columns;
      for (int64_t c = 0; c < width; ++c) {
        dst[2 * c] = even[c];
        dst[2 * c + 1] = odd[c];
      }
    }
  }
}

// The pair (a[row, 2p], a[row, 2p + 1]) as one 32-bit word, zero past the row's end.
inline uint32_t PairAt(const uint16_t* row, int64_t depth, int64_t p) {
  uint32_t pair = 0;
  if (2 * p + 1 < depth) {
    std::memcpy(&pair, row + 2 * p, 4);
  } else {
    pair = row[2 * p];  // an odd depth's last element, paired with zero
  }
  return pair;
}

#if defined(__AVX512BF16__)
// out[r, :width] for `R` rows from one block of packed columns.
template <int R>
void Tile(const uint16_t* a, int64_t depth, int64_t pairs, const uint16_t* block, Bf16* out,
          int64_t out_stride, int64_t width) {
  __m512 low[R], high[R];
  for (int r = 0; r < R; ++r) low[r] = high[r] = _mm512_setzero_ps();
  auto step = [&](int64_t p, auto pair_of_row) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(block + p * 64);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(block + p * 64 + 32);
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_of_row(r)));
      low[r] = _mm512_dpbf16_ps(low[r], av, b0);
      high[r] = _mm512_dpbf16_ps(high[r], av, b1);
    }
  };
  const int64_t whole_pairs = depth / 2;
  for (int64_t p = 0; p < whole_pairs; ++p) {
    step(p, [&](int r) {
      uint32_t pair;
      std::memcpy(&pair, a + r * depth + 2 * p, 4);
      return pair;
    });
  }
  if (pairs > whole_pairs) {  // an odd depth: its last element paired with zero
    step(whole_pairs, [&](int r) { return static_cast<uint32_t>(a[r * depth + depth - 1]); });
  }
  const __mmask16 low_mask = width >= 16 ? 0xFFFF : (1u << width) - 1;
  const __mmask16 high_mask = width >= 32 ? 0xFFFF : width <= 16 ? 0 : (1u << (width - 16)) - 1;
  for (int r = 0; r < R; ++r) {
    Bf16* row = out + r * out_stride;
    _mm256_mask_storeu_epi16(row, low_mask, (__m256i)_mm512_cvtneps_pbh(low[r]));
    _mm256_mask_storeu_epi16(row + 16, high_mask, (__m256i)_mm512_cvtneps_pbh(high[r]));
  }
}

template <int R>
void TileRows(const uint16_t* a, int64_t rows, int64_t depth, int64_t pairs,
              const uint16_t* block, Bf16* out, int64_t out_stride, int64_t width) {
  if (rows == R) return Tile<R>(a, depth, pairs, block, out, out_stride, width);
  if constexpr (R > 1) return TileRows<R - 1>(a, rows, depth, pairs, block, out, out_stride,
                                              width);
}
#endif

// out[:, columns of block] = a B.
void ProductBlock(const uint16_t* a, int64_t rows, int64_t depth, const uint16_t* packed,
                  int64_t pairs, int64_t columns, int64_t block, Bf16* out) {
  const uint16_t* packed_block = packed + block * pairs * kBlockColumns * 2;
  const int64_t first_column = block * kBlockColumns;
  const int64_t width = std::min(kBlockColumns, columns - first_column);
#if defined(__AVX512BF16__)
  for (int64_t m = 0; m < rows; m += kMaxRows) {
    TileRows<kMaxRows>(a + m * depth, std::min<int64_t>(kMaxRows, rows - m), depth, pairs,
                       packed_block, out + m * columns + first_column, columns, width);
  }
#else
  for (int64_t m = 0; m < rows; ++m) {
    float sums[kBlockColumns] = {};
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t pair = PairAt(a + m * depth, depth, p);
      const float a0 = Eigen::numext::bit_cast<float>(pair << 16);
      const float a1 = Eigen::numext::bit_cast<float>(pair & 0xFFFF0000u);
      const uint16_t* b = packed_block + p * kBlockColumns * 2;
      for (int64_t c = 0; c < kBlockColumns; ++c) {
        sums[c] += a0 * Eigen::numext::bit_cast<float>(static_cast<uint32_t>(b[2 * c]) << 16) +
                   a1 * Eigen::numext::bit_cast<float>(static_cast<uint32_t>(b[2 * c + 1]) << 16);
      }
    }
    for (int64_t c = 0; c < width; ++c) out[m * columns + first_column + c] = Bf16(sums[c]);
  }
#endif
}

class PackBfloat16Op : public OpKernel {
 public:
  explicit PackBfloat16Op(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose", &transpose_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& kernel = ctx->input(0);
    OP_REQUIRES(ctx, kernel.dims() == 2,
                tensorflow::errors::InvalidArgument("kernel must be a matrix, got ",
                                                    kernel.shape().DebugString()));
    // B is (rows, columns): the kernel, or its transpose.
    const int64_t rows = kernel.dim_size(transpose_ ? 1 : 0);
    const int64_t columns = kernel.dim_size(transpose_ ? 0 : 1);
    const int64_t pairs = (rows + 1) / 2;
    const int64_t blocks = (columns + kBlockColumns - 1) / kBlockColumns;
    Tensor* packed;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({blocks, pairs, 2 * kBlockColumns}),
                                             &packed));
    const uint16_t* b = reinterpret_cast<const uint16_t*>(kernel.flat<Bf16>().data());
    uint16_t* out = reinterpret_cast<uint16_t*>(packed->flat<Bf16>().data());
    ForRows(ctx, blocks, pairs * kBlockColumns * 8, [&](int64_t first, int64_t count) {
      for (int64_t block = first; block < first + count; ++block) {
        PackBlock(b, rows, columns, transpose_, block, pairs, out);
      }
    });
  }

 private:
  bool transpose_;
};

class PackedProductOp : public OpKernel {
 public:
  explicit PackedProductOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("columns", &columns_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& packed = ctx->input(1);
    OP_REQUIRES(ctx, a.dims() == 2,
                tensorflow::errors::InvalidArgument("a must be a matrix, got ",
                                                    a.shape().DebugString()));
    const int64_t rows = a.dim_size(0), depth = a.dim_size(1);
    const int64_t pairs = (depth + 1) / 2;
    const int64_t blocks = (columns_ + kBlockColumns - 1) / kBlockColumns;
    OP_REQUIRES(ctx, packed.shape() == TensorShape({blocks, pairs, 2 * kBlockColumns}),
                tensorflow::errors::InvalidArgument(
                    "packed must be (", blocks, ", ", pairs, ", ", 2 * kBlockColumns,
                    ") for a of ", a.shape().DebugString(), " and ", columns_,
                    " columns, got ", packed.shape().DebugString()));
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows, columns_}), &out));
    if (rows == 0) return;
    const uint16_t* a_bits = reinterpret_cast<const uint16_t*>(a.flat<Bf16>().data());
    const uint16_t* packed_bits =
        reinterpret_cast<const uint16_t*>(packed.flat<Bf16>().data());
    Bf16* out_data = out->flat<Bf16>().data();
    const int64_t columns = columns_;
    ForRows(ctx, blocks, rows * pairs * kBlockColumns, [&](int64_t first, int64_t count) {
      for (int64_t block = first; block < first + count; ++block) {
        ProductBlock(a_bits, rows, depth, packed_bits, pairs, columns, block, out_data);
      }
    });
  }

 private:
  int64_t columns_;
};

}  // namespace

REGISTER_OP("PsmmPackBfloat16")
    .Input("kernel: bfloat16")
    .Output("packed: bfloat16")
    .Attr("transpose: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &kernel));
      bool transpose;
      TF_RETURN_IF_ERROR(c->GetAttr("transpose", &transpose));
      const DimensionHandle rows = c->Dim(kernel, transpose ? 1 : 0);
      const DimensionHandle columns = c->Dim(kernel, transpose ? 0 : 1);
      DimensionHandle pairs = c->UnknownDim(), blocks = c->UnknownDim();
      if (c->ValueKnown(rows)) pairs = c->MakeDim((c->Value(rows) + 1) / 2);
      if (c->ValueKnown(columns)) {
        blocks = c->MakeDim((c->Value(columns) + kBlockColumns - 1) / kBlockColumns);
      }
      c->set_output(0, c->MakeShape({blocks, pairs, c->MakeDim(2 * kBlockColumns)}));
      return Status();
    })
    .Doc("The kernel B (or its transpose) packed for PsmmPackedProduct: "
         "packed[j, p, c, e] = B[2p + e, 32j + c], zero past B.");

REGISTER_OP("PsmmPackedProduct")
    .Input("a: bfloat16")
    .Input("packed: bfloat16")
    .Output("product: bfloat16")
    .Attr("columns: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle a;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &a));
      int64_t columns;
      TF_RETURN_IF_ERROR(c->GetAttr("columns", &columns));
      c->set_output(0, c->Matrix(c->Dim(a, 0), columns));
      return Status();
    })
    .Doc("a B for B packed by PsmmPackBfloat16 (columns: B's), float32 sums rounded once.");

REGISTER_KERNEL_BUILDER(Name("PsmmPackBfloat16").Device(DEVICE_CPU), PackBfloat16Op);
REGISTER_KERNEL_BUILDER(Name("PsmmPackedProduct").Device(DEVICE_CPU), PackedProductOp);

}  // namespace psmm_tf
