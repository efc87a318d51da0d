// The two passes of a clipped SGD update over a gradient in its own dtype, as TensorFlow CPU
// kernels.
//
// psmm_tf/training/sgd_update.py applies `w <- w - (lr c) g` to each float32 weight w, with c
// the clip scale of g's group (psmm_tf/gradients.py). As TensorFlow ops a 16-bit gradient is
// first widened to float32 (a Cast written out), its squared norm is one more pass, the clip
// scale and the learning rate one multiply each, and the update another: five passes over
// each gradient. Here the gradient is read twice, in its own dtype: once for its squared norm,
// once for the update, and the arithmetic is float32 (the norm: float32 sums over blocks of 2^14
// elements, the blocks' sums added in float64 in block order).
//
//   PsmmSquaredNorm:                 sum_i g_i^2                     (a float32 scalar)
//   PsmmResourceScaledSubtract:      w <- w - alpha g, elementwise   (the float32 variable w)
//   PsmmResourceScaledSubtractRows:  w[r_i] <- w[r_i] - alpha g_i    (an embedding's rows)
// The updates write the variable's buffer in place where no read holds it, as TensorFlow's own
// `ResourceApplyGradientDescent` does; where one does, they write a new buffer (the reader
// keeps the old value); a new buffer every step would cost a pass of its own. The row update is
// what TensorFlow's `ResourceScatterSub` computes, but that op puts its variable in "copy on
// read" mode for good: every later read of the embedding would copy the whole table
// (docs/design_notes.md, "An embedding's gradient stays its rows").

#include <vector>

#include "Eigen/Core"
#include "kernel_util.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace psmm_tf {
namespace {

// Elements per block: the unit of the split over threads and of the norm's partial sums.
constexpr int64_t kBlock = 1 << 14;

// Runs fn(first, count) over the blocks of `size` elements; an element costs `cost` cycles.
template <typename Fn>
void ForBlocks(OpKernelContext* ctx, int64_t size, int64_t cost, Fn fn) {
  const int64_t blocks = (size + kBlock - 1) / kBlock;
  ForRows(ctx, blocks, kBlock * cost, [&](int64_t first_block, int64_t count) {
    for (int64_t block = first_block; block < first_block + count; ++block) {
      const int64_t first = block * kBlock;
      fn(block, first, std::min(kBlock, size - first));
    }
  });
}

}  // namespace

REGISTER_OP("PsmmSquaredNorm")
    .Input("x: T")
    .Output("squared_norm: float")
    .Attr("T: {bfloat16, half, float}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return Status();
    })
    .Doc("sum(x^2) over every element of x, in float32 (blocks of 2^14 summed in float64).");

REGISTER_OP("PsmmResourceScaledSubtract")
    .Input("variable: resource")
    .Input("delta: T")
    .Input("alpha: float")
    .Attr("T: {bfloat16, half, float}")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle alpha;
      return c->WithRank(c->input(2), 0, &alpha);
    })
    .Doc("variable <- variable - alpha * delta for a float32 resource variable, in float32, "
         "delta read in its own dtype.");

REGISTER_OP("PsmmResourceScaledSubtractRows")
    .Input("variable: resource")
    .Input("indices: Tindices")
    .Input("rows: float")
    .Input("alpha: float")
    .Attr("Tindices: {int32, int64}")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(2), 1, &unused));
      return c->WithRank(c->input(3), 0, &unused);
    })
    .Doc("variable[indices[i]] <- variable[indices[i]] - alpha * rows[i] for a float32 "
         "resource variable, in order (a repeated index takes each of its rows); every index "
         "is checked before anything is written.");

// Looks up the float32 variable of input 0 (the caller locks it) and reads `alpha`, the
// scalar input `alpha_index`.
Status UpdateInputs(OpKernelContext* ctx, int alpha_index,
                    tensorflow::core::RefCountPtr<tensorflow::Var>* variable, float* alpha) {
  const Tensor& alpha_tensor = ctx->input(alpha_index);
  if (alpha_tensor.dims() != 0) {
    return tensorflow::errors::InvalidArgument("alpha must be a scalar, got ",
                                               alpha_tensor.shape().DebugString());
  }
  *alpha = alpha_tensor.scalar<float>()();
  TF_RETURN_IF_ERROR(
      tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), variable));
  return Status();
}

Status CheckFloatVariable(const Tensor& weights, int min_rank) {
  if (!weights.IsInitialized() || weights.dtype() != tensorflow::DT_FLOAT ||
      weights.dims() < min_rank) {
    return tensorflow::errors::InvalidArgument(
        "variable must be an initialized float32 variable of rank ", min_rank, " or more");
  }
  return Status();
}

// The buffer an update of the locked `variable` writes: the variable's own where no read holds
// it, else a new one, holding a copy of the values when `copy`. Whether a read holds it is asked
// before `target` shares the buffer (which makes its count two).
Status WritableBuffer(OpKernelContext* ctx, tensorflow::Var* variable, bool copy,
                      Tensor* target) {
  const Tensor& weights = *variable->tensor();
  const bool in_place = !variable->copy_on_read_mode.load() && weights.RefCountIsOne();
  if (in_place) {
    *target = weights;
    return Status();
  }
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_FLOAT, weights.shape(), target));
  if (copy) {
    std::copy_n(weights.flat<float>().data(), weights.NumElements(),
                target->flat<float>().data());
  }
  return Status();
}

template <typename T>
class SquaredNormOp : public OpKernel {
 public:
  explicit SquaredNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int64_t size = x.NumElements();
    const T* data = x.flat<T>().data();
    std::vector<double> partial((size + kBlock - 1) / kBlock, 0.0);
    ForBlocks(ctx, size, /*cost=*/2, [&](int64_t block, int64_t first, int64_t count) {
      partial[block] = ConstVector<T>(data + first, count).template cast<float>().square().sum();
    });
    double total = 0.0;  // in block order: the same sum however the blocks were split
    for (double value : partial) total += value;
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<float>()() = static_cast<float>(total);
  }
};

template <typename T>
class ResourceScaledSubtractOp : public OpKernel {
 public:
  explicit ResourceScaledSubtractOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& delta = ctx->input(1);
    float alpha;
    tensorflow::core::RefCountPtr<tensorflow::Var> variable;
    OP_REQUIRES_OK(ctx, UpdateInputs(ctx, /*alpha_index=*/2, &variable, &alpha));
    tensorflow::mutex_lock lock(*variable->mu());
    Tensor* weights = variable->tensor();
    OP_REQUIRES_OK(ctx, CheckFloatVariable(*weights, /*min_rank=*/0));
    OP_REQUIRES(ctx, weights->shape() == delta.shape(),
                tensorflow::errors::InvalidArgument(
                    "variable and delta must have one shape, got ",
                    weights->shape().DebugString(), " and ", delta.shape().DebugString()));
    Tensor target;
    OP_REQUIRES_OK(ctx, WritableBuffer(ctx, variable.get(), /*copy=*/false, &target));
    const float* w = weights->flat<float>().data();
    const T* g = delta.flat<T>().data();
    float* out = target.flat<float>().data();
    ForBlocks(ctx, delta.NumElements(), /*cost=*/3, [&](int64_t, int64_t first, int64_t count) {
      Vector<float>(out + first, count) = ConstVector<float>(w + first, count) -
                                  alpha * ConstVector<T>(g + first, count).template cast<float>();
    });
    *weights = target;
  }
};

template <typename Index>
class ResourceScaledSubtractRowsOp : public OpKernel {
 public:
  explicit ResourceScaledSubtractRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& indices = ctx->input(1);
    const Tensor& rows = ctx->input(2);
    float alpha;
    tensorflow::core::RefCountPtr<tensorflow::Var> variable;
    OP_REQUIRES_OK(ctx, UpdateInputs(ctx, /*alpha_index=*/3, &variable, &alpha));
    tensorflow::mutex_lock lock(*variable->mu());
    Tensor* weights = variable->tensor();
    OP_REQUIRES_OK(ctx, CheckFloatVariable(*weights, /*min_rank=*/1));
    TensorShape row_shape = weights->shape();
    row_shape.RemoveDim(0);
    TensorShape expected({indices.NumElements()});
    expected.AppendShape(row_shape);
    OP_REQUIRES(ctx, indices.dims() == 1 && rows.shape() == expected,
                tensorflow::errors::InvalidArgument(
                    "indices must be (n,) and rows (n,) + the variable's row shape ",
                    row_shape.DebugString(), ", got ", indices.shape().DebugString(), " and ",
                    rows.shape().DebugString()));
    const int64_t num_rows = weights->dim_size(0);
    const int64_t row_size = row_shape.num_elements();
    const Index* index = indices.flat<Index>().data();
    for (int64_t i = 0; i < indices.NumElements(); ++i) {
      OP_REQUIRES(ctx, index[i] >= 0 && index[i] < num_rows,
                  tensorflow::errors::InvalidArgument("indices[", i, "] = ", index[i],
                                                      " is not in [0, ", num_rows, ")"));
    }
    Tensor target;
    OP_REQUIRES_OK(ctx, WritableBuffer(ctx, variable.get(), /*copy=*/true, &target));
    // One thread, in order: a batch's rows are few (B T at most), and a repeated index
    // takes its rows one after the other.
    float* out = target.flat<float>().data();
    const float* g = rows.flat<float>().data();
    for (int64_t i = 0; i < indices.NumElements(); ++i) {
      Vector<float>(out + index[i] * row_size, row_size) -=
          alpha * ConstVector<float>(g + i * row_size, row_size);
    }
    *weights = target;
  }
};

REGISTER_KERNEL_BUILDER(Name("PsmmResourceScaledSubtractRows")
                            .Device(DEVICE_CPU)
                            .TypeConstraint<int32_t>("Tindices"),
                        ResourceScaledSubtractRowsOp<int32_t>);
REGISTER_KERNEL_BUILDER(Name("PsmmResourceScaledSubtractRows")
                            .Device(DEVICE_CPU)
                            .TypeConstraint<int64_t>("Tindices"),
                        ResourceScaledSubtractRowsOp<int64_t>);

#define REGISTER(type)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("PsmmSquaredNorm").Device(DEVICE_CPU).TypeConstraint<type>("T"),             \
      SquaredNormOp<type>);                                                             \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("PsmmResourceScaledSubtract").Device(DEVICE_CPU).TypeConstraint<type>("T"),  \
      ResourceScaledSubtractOp<type>);

REGISTER(Eigen::bfloat16)
REGISTER(Eigen::half)
REGISTER(float)
#undef REGISTER

}  // namespace psmm_tf
