// Zoneout's keep weights for both states of a layer in one pass, as a TensorFlow CPU kernel.
//
// psmm_tf/layers/zoneout_lstm.py keeps each unit's previous state with probability p: in
// training a 0/1 weight per (state, step, row, unit), 1 where 16 random bits read as an integer
// are below `threshold` = round(65536 p), and 1 at the positions that hold no token. As
// TensorFlow ops that is four passes over the (2, T, B, H) weights before the recurrence's
// first step (the stateless generator's 32-bit words, a comparison, a logical "or" with the
// missing positions, a cast to the compute dtype); here it is one. The words are those of
// TensorFlow's StatelessRandomUniformFullIntV2 (Philox-4x32-10 from the key and counter that
// StatelessRandomGetKeyCounter makes of the seed), so the weights are the ops' bit for bit:
//
//   word w   = Philox(counter + floor(w / 4), key)[w mod 4]      (a 128-bit counter)
//   bits i   = the low 16 bits of word floor(i / 2) for even i, its high 16 bits for odd i
//   keep_s[t, b, u] = 1 if bits((s T + t) B + b) H + u) < threshold or missing[t, b], else 0
//
// with s = 0 for h and 1 for c. The 16-bit draws (two a word) are zoneout_lstm.py's
// `_bernoulli_from_16_bits`, the TensorFlow ops this kernel replaces in training steps.

#include <algorithm>
#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernel_util.h"
#include "tensorflow/core/lib/random/philox_random.h"

namespace psmm_tf {
namespace {

using ::tensorflow::random::PhiloxRandom;

// Philox calls (4 words, 8 weights each) per task of the split over threads, and per batch of
// calls computed side by side (one call a vector lane).
constexpr int64_t kGroupsPerBlock = 256;
constexpr int kLanes = 16;
constexpr int64_t kWeightsPerBlock = 8 * kGroupsPerBlock;

// The generator at `counter` (two 64-bit words, low first) with `key`, as TensorFlow's
// stateless kernels read them.
PhiloxRandom Generator(const uint64_t* counter, const uint64_t* key) {
  PhiloxRandom::ResultType c;
  c[0] = static_cast<uint32_t>(counter[0]);
  c[1] = static_cast<uint32_t>(counter[0] >> 32);
  c[2] = static_cast<uint32_t>(counter[1]);
  c[3] = static_cast<uint32_t>(counter[1] >> 32);
  PhiloxRandom::Key k;
  k[0] = static_cast<uint32_t>(key[0]);
  k[1] = static_cast<uint32_t>(key[0] >> 32);
  return PhiloxRandom(c, k);
}

// The words of kLanes Philox calls at counters `counter` + 0, 1, ..., kLanes - 1 (the low
// word not wrapping), the calls side by side, one a vector lane: words[j][l] is word j of call
// l. The rounds are PhiloxRandom's (the key raised after each of the first nine); TensorFlow's
// generator computes the calls one at a time.
#ifdef __AVX512F__
void PhiloxLanes(const PhiloxRandom::ResultType& counter, const PhiloxRandom::Key& key,
                 uint32_t words[4][kLanes]) {
  // hi and lo 32 bits of m * x in each 32-bit lane: vpmuludq multiplies the even lanes.
  auto multiply = [](__m512i m, __m512i x, __m512i* hi, __m512i* lo) {
    const __m512i even = _mm512_mul_epu32(m, x);
    const __m512i odd = _mm512_mul_epu32(m, _mm512_srli_epi64(x, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  };
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i x0 = _mm512_add_epi32(_mm512_set1_epi32(counter[0]), lane);
  __m512i x1 = _mm512_set1_epi32(counter[1]);
  __m512i x2 = _mm512_set1_epi32(counter[2]);
  __m512i x3 = _mm512_set1_epi32(counter[3]);
  const __m512i m0 = _mm512_set1_epi32(0xD2511F53u), m1 = _mm512_set1_epi32(0xCD9E8D57u);
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    multiply(m0, x0, &hi0, &lo0);
    multiply(m1, x2, &hi1, &lo1);
    x0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32(k0));
    x2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32(k1));
    x1 = lo1;
    x3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm512_storeu_si512(words[0], x0);
  _mm512_storeu_si512(words[1], x1);
  _mm512_storeu_si512(words[2], x2);
  _mm512_storeu_si512(words[3], x3);
}
#endif

// A 32-bit word as two 16-bit draws: bits[0] its low half, bits[1] its high half.
inline void SplitWord(uint32_t word, uint16_t* bits) {
  bits[0] = static_cast<uint16_t>(word);
  bits[1] = static_cast<uint16_t>(word >> 16);
}

// The 16-bit draws [first, first + count) (count a multiple of 8) into `bits`.
void DrawBits(const PhiloxRandom& start, int64_t first, int64_t count, uint16_t* bits) {
  PhiloxRandom generator = start;
  generator.Skip(first / 8);
  int64_t i = 0;
#ifdef __AVX512F__
  uint32_t words[4][kLanes];
  while (count - i >= 8 * kLanes) {
    const auto& counter = generator.counter();
    if (counter[0] > UINT32_MAX - (kLanes - 1)) break;  // a carry within the batch: one by one
    PhiloxLanes(counter, generator.key(), words);
    for (int l = 0; l < kLanes; ++l, i += 8) {
      for (int j = 0; j < 4; ++j) SplitWord(words[j][l], bits + i + 2 * j);
    }
    generator.Skip(kLanes);
  }
#endif
  for (; i < count; i += 8) {  // one call at a time, as TensorFlow's generator
    const auto w = generator();
    for (int j = 0; j < 4; ++j) SplitWord(w[j], bits + i + 2 * j);
  }
}

template <typename T>
class ZoneoutKeepOp : public OpKernel {
 public:
  explicit ZoneoutKeepOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("units", &units_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("threshold", &threshold_));
    OP_REQUIRES(ctx, threshold_ >= 1 && threshold_ <= 65535,
                tensorflow::errors::InvalidArgument("threshold must be in [1, 65535], got ",
                                                    threshold_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& key = ctx->input(0);
    const Tensor& counter = ctx->input(1);
    const Tensor& missing = ctx->input(2);
    OP_REQUIRES(ctx, key.NumElements() == 1,
                tensorflow::errors::InvalidArgument("key must hold 1 element, got ",
                                                    key.shape().DebugString()));
    OP_REQUIRES(ctx, counter.NumElements() == 2,
                tensorflow::errors::InvalidArgument("counter must hold 2 elements, got ",
                                                    counter.shape().DebugString()));
    OP_REQUIRES(ctx, missing.dims() == 2,
                tensorflow::errors::InvalidArgument("missing must be (steps, batch), got ",
                                                    missing.shape().DebugString()));
    const TensorShape shape({missing.dim_size(0), missing.dim_size(1), units_});
    Tensor* keep[2];
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &keep[0]));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, shape, &keep[1]));
    const int64_t per_state = shape.num_elements();
    const int64_t size = 2 * per_state;
    if (size == 0) return;
    const PhiloxRandom start =
        Generator(counter.flat<uint64_t>().data(), key.flat<uint64_t>().data());
    const bool* missing_rows = missing.flat<bool>().data();
    T* outputs[2] = {keep[0]->flat<T>().data(), keep[1]->flat<T>().data()};
    const uint32_t threshold = static_cast<uint32_t>(threshold_);
    const int64_t units = units_;
    const int64_t blocks = (size + kWeightsPerBlock - 1) / kWeightsPerBlock;
    // Philox-4x32-10 is some 60 cycles a call, 8 weights; the rest a few cycles a weight.
    ForRows(ctx, blocks, kGroupsPerBlock * 100, [&](int64_t first_block, int64_t count) {
      uint16_t bits[kWeightsPerBlock];
      for (int64_t block = first_block; block < first_block + count; ++block) {
        const int64_t first = block * kWeightsPerBlock;
        const int64_t end = std::min(size, first + kWeightsPerBlock);
        DrawBits(start, first, (end - first + 7) / 8 * 8, bits);
        // Runs of one (state, row): the units of one step of one sequence.
        for (int64_t i = first; i < end;) {
          const int64_t state = i / per_state;
          const int64_t within = i - state * per_state;
          const int64_t row = within / units;
          const int64_t run = std::min(end - i, (row + 1) * units - within);
          T* out = outputs[state] + within;
          const uint16_t* b = bits + (i - first);
          if (missing_rows[row]) {
            std::fill(out, out + run, T(1.0f));
          } else {
            for (int64_t u = 0; u < run; ++u) out[u] = T(b[u] < threshold ? 1.0f : 0.0f);
          }
          i += run;
        }
      }
    });
  }

 private:
  int64_t units_;
  int64_t threshold_;
};

}  // namespace

REGISTER_OP("PsmmZoneoutKeep")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Input("missing: bool")
    .Output("keep_h: dtype")
    .Output("keep_c: dtype")
    .Attr("units: int >= 1")
    .Attr("threshold: int")
    .Attr("dtype: {bfloat16, half, float}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle missing;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &missing));
      int64_t units;
      TF_RETURN_IF_ERROR(c->GetAttr("units", &units));
      ShapeHandle keep;
      TF_RETURN_IF_ERROR(c->Concatenate(missing, c->Vector(units), &keep));
      c->set_output(0, keep);
      c->set_output(1, keep);
      return Status();
    })
    .Doc("Zoneout's 0/1 keep weights of h and c, (steps, batch, units) each, from the 16-bit "
         "halves of StatelessRandomUniformFullIntV2's words (key, counter): 1 where the bits "
         "are below threshold or the position is missing.");

#define REGISTER(type)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("PsmmZoneoutKeep").Device(DEVICE_CPU).TypeConstraint<type>("dtype"),         \
      ZoneoutKeepOp<type>);
REGISTER(float)
REGISTER(Eigen::bfloat16)
REGISTER(Eigen::half)
#undef REGISTER

}  // namespace psmm_tf
