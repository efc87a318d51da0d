// One step of the zoneout LSTM cell as two TensorFlow CPU kernels, forward and backward.
//
// The recurrence of psmm_tf/layers/lstm_recurrence_tf.py runs the cell's elementwise work
// (three sigmoids, two tanhs, the cell update and zoneout; and its derivative) once per step
// and layer. As separate TensorFlow ops that is some thirty small kernels a step, each paying
// the executor's dispatch; here it is one kernel each way. The products (h_{t-1} U and
// dz U^T) stay outside, in oneDNN. Gates are in Keras' order (input, forget, cell, output).
// Under a 16-bit policy (L = bfloat16 or half) the products are 16-bit and the cell float32
// (T): the kernels read the products' 16-bit tensors (x_t W + b, h_{t-1} U and dz_{t+1} U^T)
// and write the 16-bit tensors the next products read (h_t and dz_t) beside the float32 state,
// so no step needs a cast of its own. With L = T the 16-bit h_t is h_t itself.
// The sigmoid and tanh are Eigen's, the functors TensorFlow's Sigmoid and Tanh kernels use.
//
// Forward, per unit (z = x_t W + b + h_{t-1} U, k the zoneout weights of the previous state):
//   i = sig(z_i), f = sig(z_f), g = tanh(z_g), o = sig(z_o)
//   c' = f c_{t-1} + i g,  h' = o tanh(c')
//   c_t = c' + k^c (c_{t-1} - c'),  h_t = h' + k^h (h_{t-1} - h')
// Backward, from dh (given as three parts) and dc reaching h_t and c_t:
//   dh' = (1 - k^h) dh,  dc' = (1 - k^c) dc + dh' o (1 - tanh(c')^2)
//   dz = [dc' g i (1 - i), dc' c_{t-1} f (1 - f), dc' i (1 - g^2), dh' tanh(c') o (1 - o)]
//   dh_{t-1} (the part not through U) = k^h dh,  dc_{t-1} = k^c dc + dc' f

#include <type_traits>

#include "Eigen/Core"
#include "kernel_util.h"

namespace psmm_tf {
namespace {

// A (rows, units) block of a row-major matrix whose rows are `stride` apart.
template <typename T>
using Block = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                         Eigen::OuterStride<>>;
template <typename T>
using ConstBlock =
    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
               Eigen::OuterStride<>>;

template <typename T>
ConstBlock<T> Read(const Tensor& t, int64_t row, int64_t rows, int64_t offset, int64_t units,
                   int64_t stride) {
  return ConstBlock<T>(t.flat<T>().data() + row * stride + offset, rows, units,
                       Eigen::OuterStride<>(stride));
}

template <typename T>
Block<T> Write(Tensor* t, int64_t row, int64_t rows, int64_t offset, int64_t units,
               int64_t stride) {
  return Block<T>(t->flat<T>().data() + row * stride + offset, rows, units,
                  Eigen::OuterStride<>(stride));
}

Status CheckShapes(OpKernelContext* ctx, const Tensor& wide, int wide_parts,
                   std::initializer_list<int> narrow_inputs, int64_t* rows, int64_t* units) {
  if (wide.dims() != 2 || wide.dim_size(1) % wide_parts != 0) {
    return tensorflow::errors::InvalidArgument("input 0 must be (batch, ", wide_parts,
                                               " * units), got ", wide.shape().DebugString());
  }
  *rows = wide.dim_size(0);
  *units = wide.dim_size(1) / wide_parts;
  for (int index : narrow_inputs) {
    const TensorShape& shape = ctx->input(index).shape();
    if (shape != TensorShape({*rows, *units})) {
      return tensorflow::errors::InvalidArgument("input ", index, " must be (", *rows, ", ",
                                                 *units, "), got ", shape.DebugString());
    }
  }
  return Status();
}

}  // namespace

REGISTER_OP("PsmmZoneoutCell")
    .Input("projected: L")
    .Input("product: L")
    .Input("h_prev: T")
    .Input("c_prev: T")
    .Input("keep_h: T")
    .Input("keep_c: T")
    .Output("h: T")
    .Output("c: T")
    .Output("activations: T")
    .Output("h_low: L")
    .Attr("T: {float, double}")
    .Attr("L: {bfloat16, half, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle state;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &state));
      DimensionHandle wide;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(state, 1), 5, &wide));
      c->set_output(0, state);
      c->set_output(1, state);
      c->set_output(2, c->Matrix(c->Dim(state, 0), wide));
      c->set_output(3, state);
      return Status();
    })
    .Doc("One zoneout LSTM step from z = projected + product (x_t W + b and h_{t-1} U): h, "
         "c and the activations sig(i), sig(f), tanh(g), sig(o), tanh(c') as "
         "(batch, 5 units), in T; and h in L (the next step's product reads it).");

REGISTER_OP("PsmmZoneoutCellGrad")
    .Input("dh_out: T")
    .Input("dh_carried: T")
    .Input("dh_through_kernel: L")
    .Input("dc: T")
    .Input("activations: T")
    .Input("c_prev: T")
    .Input("keep_h: T")
    .Input("keep_c: T")
    .Output("d_gates: L")
    .Output("dh_carried_prev: T")
    .Output("dc_prev: T")
    .Attr("T: {float, double}")
    .Attr("L: {bfloat16, half, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle state;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &state));
      DimensionHandle wide;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(state, 1), 4, &wide));
      c->set_output(0, c->Matrix(c->Dim(state, 0), wide));
      c->set_output(1, state);
      c->set_output(2, state);
      return Status();
    })
    .Doc("The backward pass of PsmmZoneoutCell, from dh = dh_out + dh_carried + "
         "dh_through_kernel and dc reaching h_t and c_t: the gates' gradient (in L, for the "
         "products), and the previous state's gradients (dh's part not through the recurrent "
         "kernel).");

template <typename T, typename L>
class ZoneoutCellOp : public OpKernel {
 public:
  explicit ZoneoutCellOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& projected = ctx->input(0);
    const Tensor& product = ctx->input(1);
    int64_t rows, units;
    OP_REQUIRES_OK(ctx, CheckShapes(ctx, projected, 4, {2, 3, 4, 5}, &rows, &units));
    OP_REQUIRES(ctx, product.shape() == projected.shape(),
                tensorflow::errors::InvalidArgument("input 1 must be ",
                                                    projected.shape().DebugString(), ", got ",
                                                    product.shape().DebugString()));
    Tensor *h, *c, *activations;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows, units}), &h));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows, units}), &c));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows, 5 * units}), &activations));
    Tensor* h_low = h;
    if constexpr (std::is_same_v<T, L>) {
      ctx->set_output(3, *h);  // the same buffer
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({rows, units}), &h_low));
    }
    const int64_t n = units, g4 = 4 * units, g5 = 5 * units;
    ForRows(ctx, rows, /*cost_per_row=*/units * 60, [&](int64_t row, int64_t count) {
      auto gate = [&](int k) {
        return Read<L>(projected, row, count, k * n, n, g4).template cast<T>() +
               Read<L>(product, row, count, k * n, n, g4).template cast<T>();
      };
      auto i = Write<T>(activations, row, count, 0, n, g5);
      auto f = Write<T>(activations, row, count, n, n, g5);
      auto g = Write<T>(activations, row, count, 2 * n, n, g5);
      auto o = Write<T>(activations, row, count, 3 * n, n, g5);
      auto tanh_c = Write<T>(activations, row, count, 4 * n, n, g5);
      i = gate(0).logistic();
      f = gate(1).logistic();
      g = gate(2).tanh();
      o = gate(3).logistic();
      auto h_prev = Read<T>(ctx->input(2), row, count, 0, n, n);
      auto c_prev = Read<T>(ctx->input(3), row, count, 0, n, n);
      auto c_out = Write<T>(c, row, count, 0, n, n);
      auto h_out = Write<T>(h, row, count, 0, n, n);
      c_out = f * c_prev + i * g;  // c', zoned out below
      tanh_c = c_out.tanh();
      c_out += Read<T>(ctx->input(5), row, count, 0, n, n) * (c_prev - c_out);
      h_out = o * tanh_c;  // h'
      h_out += Read<T>(ctx->input(4), row, count, 0, n, n) * (h_prev - h_out);
      if constexpr (!std::is_same_v<T, L>) {
        Write<L>(h_low, row, count, 0, n, n) = h_out.template cast<L>();
      }
    });
  }
};

template <typename T, typename L>
class ZoneoutCellGradOp : public OpKernel {
 public:
  explicit ZoneoutCellGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& activations = ctx->input(4);
    int64_t rows, units;
    OP_REQUIRES_OK(ctx, CheckShapes(ctx, activations, 5, {0, 1, 2, 3, 5, 6, 7}, &rows,
                                    &units));
    Tensor *d_gates, *dh_prev, *dc_prev;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows, 4 * units}), &d_gates));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows, units}), &dh_prev));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows, units}), &dc_prev));
    const int64_t n = units, g4 = 4 * units, g5 = 5 * units;
    ForRows(ctx, rows, /*cost_per_row=*/units * 60, [&](int64_t row, int64_t count) {
      auto state = [&](int input) { return Read<T>(ctx->input(input), row, count, 0, n, n); };
      auto i = Read<T>(activations, row, count, 0, n, g5);
      auto f = Read<T>(activations, row, count, n, n, g5);
      auto g = Read<T>(activations, row, count, 2 * n, n, g5);
      auto o = Read<T>(activations, row, count, 3 * n, n, g5);
      auto tanh_c = Read<T>(activations, row, count, 4 * n, n, g5);
      auto dc = state(3);
      auto c_prev = state(5);
      auto keep_h = state(6);
      auto keep_c = state(7);
      // dh (the sum of its three parts, in dh_prev's buffer until its last line), then dc'
      // (in dc_prev's buffer until its last line), then dh'.
      auto dh = Write<T>(dh_prev, row, count, 0, n, n);
      dh = state(0) + state(1) + Read<L>(ctx->input(2), row, count, 0, n, n).template cast<T>();
      const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> dh_new =
          (T(1) - keep_h) * dh;
      auto dc_new = Write<T>(dc_prev, row, count, 0, n, n);
      dc_new = (T(1) - keep_c) * dc + dh_new * o * (T(1) - tanh_c * tanh_c);
      Write<L>(d_gates, row, count, 0, n, g4) =
          (dc_new * g * i * (T(1) - i)).template cast<L>();
      Write<L>(d_gates, row, count, n, n, g4) =
          (dc_new * c_prev * f * (T(1) - f)).template cast<L>();
      Write<L>(d_gates, row, count, 2 * n, n, g4) =
          (dc_new * i * (T(1) - g * g)).template cast<L>();
      Write<L>(d_gates, row, count, 3 * n, n, g4) =
          (dh_new * tanh_c * o * (T(1) - o)).template cast<L>();
      dh = keep_h * dh;                  // dh_{t-1}, less its part through U
      dc_new = keep_c * dc + dc_new * f;  // dc_{t-1}
    });
  }
};

#define REGISTER(type, low)                                                                    \
  REGISTER_KERNEL_BUILDER(Name("PsmmZoneoutCell")                                             \
                              .Device(DEVICE_CPU)                                             \
                              .TypeConstraint<type>("T")                                      \
                              .TypeConstraint<low>("L"),                                      \
                          ZoneoutCellOp<type, low>);                                          \
  REGISTER_KERNEL_BUILDER(Name("PsmmZoneoutCellGrad")                                         \
                              .Device(DEVICE_CPU)                                             \
                              .TypeConstraint<type>("T")                                      \
                              .TypeConstraint<low>("L"),                                      \
                          ZoneoutCellGradOp<type, low>);

REGISTER(float, float)
REGISTER(float, Eigen::bfloat16)
REGISTER(float, Eigen::half)
REGISTER(double, double)
#undef REGISTER

}  // namespace psmm_tf
