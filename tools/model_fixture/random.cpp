// Tools (fixtures): Irwin–Hall normal values from splitmix64 (see random.h).
// Built with -ffp-contract=off (CMakeLists.txt) so `mean + std * x` rounds twice
// everywhere.
#include "random.h"

namespace minfer::fixture {

double unit_normal(uint64_t stream, uint64_t index) {
  // Sum of four 53-bit integers: exact in uint64 (< 2^55).
  uint64_t sum = 0;
  for (uint64_t k = 1; k <= 4; ++k) sum += splitmix64_mix(stream + (4 * index + k) * kGamma) >> 11;
  // Centre (mean of the sum is 2·2^53) in exact integer arithmetic; |centred| < 2^54
  // converts to double exactly only up to 2^53, so the conversion rounds once,
  // identically everywhere (round-to-nearest-even).
  const int64_t centred = static_cast<int64_t>(sum) - (int64_t{1} << 54);
  // Var(U(0,1)) = 1/12, four of them: 1/3; scale by sqrt(3) for unit variance.
  constexpr double kScale = 1.7320508075688772 / 9007199254740992.0;  // sqrt(3) / 2^53
  return static_cast<double>(centred) * kScale;
}

void fill_normal(uint64_t stream, uint64_t first, double mean, double std, std::span<float> dst) {
  for (size_t k = 0; k < dst.size(); ++k) {
    dst[k] = static_cast<float>(mean + std * unit_normal(stream, first + k));
  }
}

}  // namespace minfer::fixture
