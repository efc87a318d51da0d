// The native kernels' one translation unit: the loader (build.py) compiles this file alone, so
// TensorFlow's headers, which take most of a kernel's compile, are parsed once for all five
// (docs/results.md, "The native kernels' first-use build").

// On a CPU with AVX512-FP16, -march=native defines __AVX512FP16__ and Eigen (TensorFlow's
// headers) then compiles its half-precision packet math, which g++ 12 rejects. The kernels do no
// half-precision arithmetic, so Eigen is configured without it (the compiler's own intrinsics
// headers, reading the macro unset, still declare theirs under a target pragma).
#undef __AVX512FP16__

#include "zoneout_cell.cc"
#include "zoneout_keep.cc"
#include "recurrent_product.cc"
#include "target_log_softmax.cc"
#include "sgd_update.cc"
