// The native kernels' one translation unit: the loader (build.py) compiles this file alone, so
// TensorFlow's headers, which take most of a kernel's compile, are parsed once for all five
// (docs/results.md, "The native kernels' first-use build").

#include "zoneout_cell.cc"
#include "zoneout_keep.cc"
#include "recurrent_product.cc"
#include "target_log_softmax.cc"
#include "sgd_update.cc"
