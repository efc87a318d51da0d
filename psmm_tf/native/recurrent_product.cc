// The recurrence's products on a packed kernel, as TensorFlow CPU kernels.
//
// Each step of psmm_tf/layers/lstm_recurrence_tf.py multiplies a few rows (the batch) by the
// same recurrent kernel: `h_{t-1} U` forward, `dz_t U^T` backward, `(B, H) x (H, 4H)` and
// `(B, 4H) x (4H, H)`, T times a call. oneDNN's bfloat16 product copies its right operand into
// the pair-interleaved layout of the AVX512-BF16 dot product (VDPBF16PS) on every call, and at
// a small batch ran those products well below the rate of the step's large products, float32's
// too (docs/results.md, "The recurrent products on a packed kernel"). Here the kernel is packed once per call of the recurrence (`PsmmPackKernel`) and
// each step's product reads it as it is (`PsmmPackedProduct`), a tile of 12 rows by 32 columns
// at a time (24 vector accumulators):
//
//   packed[j, p, c, e] = B[g p + e, 32 j + c]   (zero past B's rows or columns)
//   out[m, n] = T(sum_k a[m, k] B[k, n])         (float32 sums, rounded once to T)
//
// with B = U (transpose = false) or U^T (transpose = true, read from U), j a block of 32 output
// columns, p a group of g rows of B: g = 2 in bfloat16 (VDPBF16PS sums a pair of products),
// 1 in float32 (FMA). The sums are float32, as oneDNN's, in another order, so the two differ by
// the rounding of T. On CPUs without AVX512-BF16 (bfloat16) or AVX-512 (float32) the kernels
// are built with plain loops (the same sums, slowly); psmm_tf uses them only where the CPU has
// the instructions.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "Eigen/Core"
#include "kernel_util.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace psmm_tf {
namespace {

using Bf16 = Eigen::bfloat16;
using ::tensorflow::DataType;

constexpr int64_t kBlockColumns = 32;  // output columns per block: two vectors of 16 floats
constexpr int kMaxRows = 12;           // rows per tile: 24 accumulators

// Rows of B that one packed group holds: a pair in bfloat16 (VDPBF16PS sums pairs), one row
// in float32.
template <typename T>
constexpr int64_t GroupRows() {
  return std::is_same<T, Bf16>::value ? 2 : 1;
}

int64_t Groups(int64_t rows, int64_t group_rows) { return (rows + group_rows - 1) / group_rows; }

int64_t Blocks(int64_t columns) { return (columns + kBlockColumns - 1) / kBlockColumns; }

// Block `block` of `packed` from B = b (rows, columns), or B = b^T with b (columns, rows):
// packed[block, p, c, e] = B[g p + e, 32 block + c], zero past B.
template <typename T>
void PackBlock(const T* b_values, int64_t rows, int64_t columns, bool transpose, int64_t block,
               T* packed_values) {
  // Copied as plain bits (Eigen's bfloat16 is a class).
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
  const Bits* b = reinterpret_cast<const Bits*>(b_values);
  Bits* packed = reinterpret_cast<Bits*>(packed_values);
  constexpr int64_t g = GroupRows<T>();
  const int64_t groups = Groups(rows, g);
  Bits* out = packed + block * groups * kBlockColumns * g;
  const int64_t first_column = block * kBlockColumns;
  const int64_t width = std::min(kBlockColumns, columns - first_column);
  if (width < kBlockColumns || rows % g) std::fill(out, out + groups * kBlockColumns * g, 0);
  const int64_t whole_groups = rows / g;
  for (int64_t p = 0; p < groups; ++p) {
    Bits* dst = out + p * kBlockColumns * g;
    const int64_t group_size = p < whole_groups ? g : rows - g * p;
    if (transpose) {
      // B[g p + e, n] = b[n, g p + e]: the group is adjacent in b's row n.
      const Bits* src = b + first_column * rows + g * p;
      for (int64_t c = 0; c < width; ++c) {
        std::memcpy(dst + g * c, src + c * rows, group_size * sizeof(Bits));
      }
    } else if (group_size == 2) {  // a bfloat16 pair: the two rows interleaved in one pass
      const Bits* even = b + 2 * p * columns + first_column;
      const Bits* odd = even + columns;
      for (int64_t c = 0; c < width; ++c) {
        dst[2 * c] = even[c];
        dst[2 * c + 1] = odd[c];
      }
    } else {
      for (int64_t e = 0; e < group_size; ++e) {
        const Bits* src = b + (g * p + e) * columns + first_column;
        for (int64_t c = 0; c < width; ++c) dst[g * c + e] = src[c];
      }
    }
  }
}

#if defined(__AVX512F__)
// The first `width` of 16 lanes (all for 16 or more, none for 0 or fewer).
inline __mmask16 ColumnMask(int64_t width) {
  return width >= 16 ? 0xFFFF : width <= 0 ? 0 : (1u << width) - 1;
}
#endif

#if defined(__AVX512BF16__)
// out[r, :width] for `R` rows of bfloat16 `a` from one block of packed columns.
template <int R>
void Tile(const Bf16* a_values, int64_t depth, const Bf16* block_values, Bf16* out,
          int64_t out_stride, int64_t width) {
  const uint16_t* a = reinterpret_cast<const uint16_t*>(a_values);
  const uint16_t* block = reinterpret_cast<const uint16_t*>(block_values);
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
  if (depth % 2) {  // an odd depth: its last element paired with zero
    step(whole_pairs, [&](int r) { return static_cast<uint32_t>(a[r * depth + depth - 1]); });
  }
  const __mmask16 low_mask = ColumnMask(width), high_mask = ColumnMask(width - 16);
  for (int r = 0; r < R; ++r) {
    Bf16* row = out + r * out_stride;
    _mm256_mask_storeu_epi16(row, low_mask, (__m256i)_mm512_cvtneps_pbh(low[r]));
    _mm256_mask_storeu_epi16(row + 16, high_mask, (__m256i)_mm512_cvtneps_pbh(high[r]));
  }
}
#endif

#if defined(__AVX512F__)
// out[r, :width] for `R` rows of float32 `a` from one block of packed columns.
template <int R>
void Tile(const float* a, int64_t depth, const float* block, float* out, int64_t out_stride,
          int64_t width) {
  __m512 low[R], high[R];
  for (int r = 0; r < R; ++r) low[r] = high[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    const __m512 b0 = _mm512_loadu_ps(block + k * kBlockColumns);
    const __m512 b1 = _mm512_loadu_ps(block + k * kBlockColumns + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * depth + k]);
      low[r] = _mm512_fmadd_ps(av, b0, low[r]);
      high[r] = _mm512_fmadd_ps(av, b1, high[r]);
    }
  }
  const __mmask16 low_mask = ColumnMask(width), high_mask = ColumnMask(width - 16);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(out + r * out_stride, low_mask, low[r]);
    _mm512_mask_storeu_ps(out + r * out_stride + 16, high_mask, high[r]);
  }
}
#endif

template <typename T>
constexpr bool HasVectorTile() {
#if defined(__AVX512BF16__)
  if (std::is_same<T, Bf16>::value) return true;
#endif
#if defined(__AVX512F__)
  if (std::is_same<T, float>::value) return true;
#endif
  return false;
}

template <typename T, int R>
void TileRows(const T* a, int64_t rows, int64_t depth, const T* block, T* out,
              int64_t out_stride, int64_t width) {
#if defined(__AVX512F__)
  if constexpr (HasVectorTile<T>()) {
    if (rows == R) return Tile<R>(a, depth, block, out, out_stride, width);
    if constexpr (R > 1) return TileRows<T, R - 1>(a, rows, depth, block, out, out_stride,
                                                   width);
  }
#endif
}

// out[:, columns of block] = a B: float32 sums, rounded once to T.
template <typename T>
void ProductBlock(const T* a, int64_t rows, int64_t depth, const T* packed, int64_t columns,
                  int64_t block, T* out) {
  constexpr int64_t g = GroupRows<T>();
  const int64_t groups = Groups(depth, g);
  const T* packed_block = packed + block * groups * kBlockColumns * g;
  const int64_t first_column = block * kBlockColumns;
  const int64_t width = std::min(kBlockColumns, columns - first_column);
  if constexpr (HasVectorTile<T>()) {
    for (int64_t m = 0; m < rows; m += kMaxRows) {
      TileRows<T, kMaxRows>(a + m * depth, std::min<int64_t>(kMaxRows, rows - m), depth,
                            packed_block, out + m * columns + first_column, columns, width);
    }
  } else {  // plain loops (CPUs without the instructions): the same sums
    for (int64_t m = 0; m < rows; ++m) {
      float sums[kBlockColumns] = {};
      for (int64_t k = 0; k < depth; ++k) {
        const float value = static_cast<float>(a[m * depth + k]);
        const T* b = packed_block + (k / g) * kBlockColumns * g + k % g;
        for (int64_t c = 0; c < kBlockColumns; ++c) {
          sums[c] += value * static_cast<float>(b[g * c]);
        }
      }
      for (int64_t c = 0; c < width; ++c) out[m * columns + first_column + c] = T(sums[c]);
    }
  }
}

template <typename T>
class PackKernelOp : public OpKernel {
 public:
  explicit PackKernelOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
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
    constexpr int64_t g = GroupRows<T>();
    const int64_t blocks = Blocks(columns);
    Tensor* packed;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({blocks, Groups(rows, g), g * kBlockColumns}),
                            &packed));
    const T* b = kernel.flat<T>().data();
    T* out = packed->flat<T>().data();
    ForRows(ctx, blocks, rows * kBlockColumns * 4, [&](int64_t first, int64_t count) {
      for (int64_t block = first; block < first + count; ++block) {
        PackBlock(b, rows, columns, transpose_, block, out);
      }
    });
  }

 private:
  bool transpose_;
};

template <typename T>
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
    constexpr int64_t g = GroupRows<T>();
    const int64_t blocks = Blocks(columns_);
    const TensorShape expected({blocks, Groups(depth, g), g * kBlockColumns});
    OP_REQUIRES(ctx, packed.shape() == expected,
                tensorflow::errors::InvalidArgument(
                    "packed must be ", expected.DebugString(), " for a of ",
                    a.shape().DebugString(), " and ", columns_, " columns, got ",
                    packed.shape().DebugString()));
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows, columns_}), &out));
    if (rows == 0) return;
    const T* a_values = a.flat<T>().data();
    const T* packed_values = packed.flat<T>().data();
    T* out_values = out->flat<T>().data();
    const int64_t columns = columns_;
    ForRows(ctx, blocks, rows * depth * kBlockColumns / 16, [&](int64_t first, int64_t count) {
      for (int64_t block = first; block < first + count; ++block) {
        ProductBlock(a_values, rows, depth, packed_values, columns, block, out_values);
      }
    });
  }

 private:
  int64_t columns_;
};

}  // namespace

REGISTER_OP("PsmmPackKernel")
    .Input("kernel: T")
    .Output("packed: T")
    .Attr("T: {bfloat16, float}")
    .Attr("transpose: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &kernel));
      bool transpose;
      TF_RETURN_IF_ERROR(c->GetAttr("transpose", &transpose));
      DataType type;
      TF_RETURN_IF_ERROR(c->GetAttr("T", &type));
      const int64_t g = type == ::tensorflow::DT_BFLOAT16 ? 2 : 1;
      const DimensionHandle rows = c->Dim(kernel, transpose ? 1 : 0);
      const DimensionHandle columns = c->Dim(kernel, transpose ? 0 : 1);
      DimensionHandle groups = c->UnknownDim(), blocks = c->UnknownDim();
      if (c->ValueKnown(rows)) groups = c->MakeDim(Groups(c->Value(rows), g));
      if (c->ValueKnown(columns)) blocks = c->MakeDim(Blocks(c->Value(columns)));
      c->set_output(0, c->MakeShape({blocks, groups, c->MakeDim(g * kBlockColumns)}));
      return Status();
    })
    .Doc("The kernel B (or its transpose) packed for PsmmPackedProduct: "
         "packed[j, p, c, e] = B[g p + e, 32 j + c] (g = 2 in bfloat16, 1 in float32), "
         "zero past B.");

REGISTER_OP("PsmmPackedProduct")
    .Input("a: T")
    .Input("packed: T")
    .Output("product: T")
    .Attr("T: {bfloat16, float}")
    .Attr("columns: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle a;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &a));
      int64_t columns;
      TF_RETURN_IF_ERROR(c->GetAttr("columns", &columns));
      c->set_output(0, c->Matrix(c->Dim(a, 0), columns));
      return Status();
    })
    .Doc("a B for B packed by PsmmPackKernel (columns: B's), float32 sums rounded once.");

#define REGISTER(type)                                                                  \
  REGISTER_KERNEL_BUILDER(Name("PsmmPackKernel").Device(DEVICE_CPU).TypeConstraint<type>("T"), \
                          PackKernelOp<type>);                                          \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("PsmmPackedProduct").Device(DEVICE_CPU).TypeConstraint<type>("T"),           \
      PackedProductOp<type>);
REGISTER(Bf16)
REGISTER(float)
#undef REGISTER

}  // namespace psmm_tf
