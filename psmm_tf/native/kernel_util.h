// What the native kernels of psmm_tf share: TensorFlow's names, contiguous runs of elements as
// Eigen arrays, and the split of a kernel's rows over TensorFlow's intra-op threads.

#ifndef PSMM_TF_NATIVE_KERNEL_UTIL_H_
#define PSMM_TF_NATIVE_KERNEL_UTIL_H_

#include <cstdint>

#include "Eigen/Core"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

namespace psmm_tf {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// `size` contiguous elements from a pointer, as an Eigen array (elementwise arithmetic).
template <typename T>
using ConstVector = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using Vector = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// Runs fn(first_row, row_count) over `rows` rows on TensorFlow's intra-op threads; a row costs
// about `cost_per_row` cycles (TensorFlow splits the rows by it).
template <typename Fn>
void ForRows(OpKernelContext* ctx, int64_t rows, int64_t cost_per_row, Fn fn) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  workers->ParallelFor(rows, cost_per_row, [&](int64_t begin, int64_t end) {
    if (end > begin) fn(begin, end - begin);
  });
}

}  // namespace psmm_tf

#endif  // PSMM_TF_NATIVE_KERNEL_UTIL_H_
