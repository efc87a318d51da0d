// log softmax(z)[y] over the rows of (N, V) logits, as two TensorFlow CPU kernels, forward and
// backward.
//
// psmm_tf/layers/target_log_softmax_tf.py takes the target's log-probability of the
// vocabulary softmax (the loss of every training step). As TensorFlow ops that is a softmax, a
// gather, a log, a scaled copy of the softmax and a scatter; under a 16-bit policy also a cast
// of the (N, V) logits to float32 and of their gradient back. Here the forward pass reads the
// logits twice (the row's maximum, then the sum of exponentials) and writes two numbers a row;
// the backward pass reads them once and writes the gradient in the logits' dtype. The
// arithmetic is float32 whatever the logits' dtype.
//
// Forward, per row (m = max_j z_j, s = sum_j exp(z_j - m)):
//   log_prob = z_y - m - log s;  m and 1/s are kept for the backward pass
// Backward, from d = d log_prob (p_j = exp(z_j - m) / s, the softmax):
//   dz_j = -d p_j for j != y,  dz_y = d (1 - p_y)
// A NaN anywhere in a row makes its log-probability and gradient NaN, as the softmax does.

#include <cmath>
#include <limits>

#include "Eigen/Core"
#include "kernel_util.h"

namespace psmm_tf {
namespace {

// Checks the (N, V) logits and (N,) targets in [0, V); the other inputs named must be (N,).
Status CheckInputs(OpKernelContext* ctx, std::initializer_list<int> row_inputs, int64_t* rows,
                   int64_t* vocab_size) {
  const Tensor& logits = ctx->input(0);
  if (logits.dims() != 2 || logits.dim_size(1) == 0) {
    return tensorflow::errors::InvalidArgument("logits must be (rows, vocabulary size >= 1), got ",
                                               logits.shape().DebugString());
  }
  *rows = logits.dim_size(0);
  *vocab_size = logits.dim_size(1);
  for (int index : row_inputs) {
    const TensorShape& shape = ctx->input(index).shape();
    if (shape != TensorShape({*rows})) {
      return tensorflow::errors::InvalidArgument("input ", index, " must be (", *rows,
                                                 "), got ", shape.DebugString());
    }
  }
  const auto targets = ctx->input(1).flat<int32_t>();
  for (int64_t row = 0; row < *rows; ++row) {
    if (targets(row) < 0 || targets(row) >= *vocab_size) {
      return tensorflow::errors::InvalidArgument("targets must be in [0, ", *vocab_size,
                                                 "), got ", targets(row), " at row ", row);
    }
  }
  return Status();
}

// Runs fn(row) for each of `rows` rows of `vocab_size` columns on the intra-op threads.
template <typename Fn>
void ForEachRow(OpKernelContext* ctx, int64_t rows, int64_t vocab_size, Fn fn) {
  ForRows(ctx, rows, /*cost_per_row=*/vocab_size * 20, [&](int64_t first, int64_t count) {
    for (int64_t row = first; row < first + count; ++row) fn(row);
  });
}

}  // namespace

REGISTER_OP("PsmmTargetLogSoftmax")
    .Input("logits: T")
    .Input("targets: int32")
    .Output("log_prob: float")
    .Output("row_max: float")
    .Output("inverse_sum: float")
    .Attr("T: {bfloat16, half, float}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle logits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &logits));
      for (int output = 0; output < 3; ++output) {
        c->set_output(output, c->Vector(c->Dim(logits, 0)));
      }
      return Status();
    })
    .Doc("log softmax(logits)[targets] of each row of (N, V) logits, in float32, and the "
         "row's maximum m and 1 / sum_j exp(z_j - m) (the backward pass reads them).");

REGISTER_OP("PsmmTargetLogSoftmaxGrad")
    .Input("logits: T")
    .Input("targets: int32")
    .Input("row_max: float")
    .Input("inverse_sum: float")
    .Input("d_log_prob: float")
    .Output("d_logits: T")
    .Attr("T: {bfloat16, half, float}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc("The gradient of PsmmTargetLogSoftmax: d (one_hot(targets) - softmax(logits)).");

template <typename T>
class TargetLogSoftmaxOp : public OpKernel {
 public:
  explicit TargetLogSoftmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    int64_t rows, vocab_size;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, {1}, &rows, &vocab_size));
    Tensor *log_prob, *row_max, *inverse_sum;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows}), &log_prob));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows}), &row_max));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows}), &inverse_sum));
    const T* logits = ctx->input(0).flat<T>().data();
    const int32_t* targets = ctx->input(1).flat<int32_t>().data();
    float* value = log_prob->flat<float>().data();
    float* top = row_max->flat<float>().data();
    float* scale = inverse_sum->flat<float>().data();
    ForEachRow(ctx, rows, vocab_size, [&](int64_t row) {
      const auto z = ConstVector<T>(logits + row * vocab_size, vocab_size).template cast<float>();
      top[row] = z.maxCoeff();
      const float sum = (z - top[row]).exp().sum();
      scale[row] = 1.0f / sum;
      value[row] = static_cast<float>(logits[row * vocab_size + targets[row]]) - top[row] -
                   std::log(sum);
    });
  }
};

template <typename T>
class TargetLogSoftmaxGradOp : public OpKernel {
 public:
  explicit TargetLogSoftmaxGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    int64_t rows, vocab_size;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, {1, 2, 3, 4}, &rows, &vocab_size));
    Tensor* d_logits;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &d_logits));
    const T* logits = ctx->input(0).flat<T>().data();
    const int32_t* targets = ctx->input(1).flat<int32_t>().data();
    const float* top = ctx->input(2).flat<float>().data();
    const float* scale = ctx->input(3).flat<float>().data();
    const float* d_value = ctx->input(4).flat<float>().data();
    T* out = d_logits->flat<T>().data();
    ForEachRow(ctx, rows, vocab_size, [&](int64_t row) {
      const float d = d_value[row];
      const T* z = logits + row * vocab_size;
      Vector<T>(out + row * vocab_size, vocab_size) =
          ((ConstVector<T>(z, vocab_size).template cast<float>() - top[row]).exp() *
           (-d * scale[row]))
              .template cast<T>();
      const float target_prob =
          std::exp(static_cast<float>(z[targets[row]]) - top[row]) * scale[row];
      out[row * vocab_size + targets[row]] = static_cast<T>(d * (1.0f - target_prob));
    });
  }
};

#define REGISTER(type)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("PsmmTargetLogSoftmax").Device(DEVICE_CPU).TypeConstraint<type>("T"),        \
      TargetLogSoftmaxOp<type>);                                                        \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("PsmmTargetLogSoftmaxGrad").Device(DEVICE_CPU).TypeConstraint<type>("T"),    \
      TargetLogSoftmaxGradOp<type>);

REGISTER(Eigen::bfloat16)
REGISTER(Eigen::half)
REGISTER(float)
#undef REGISTER

}  // namespace psmm_tf
