// Stage 14 (logits → token): the sampler's own seeded random source.
// Invariant: same seed → same stream of draws on every compiler, standard library and
// machine (only 64-bit integer ops and one exact int→double conversion).
#pragma once

#include <cstdint>

namespace minfer::sample {

// xoshiro256** 1.0 (Blackman & Vigna, "Scrambled linear pseudorandom number generators",
// ACM TOMS 2021; reference at https://prng.di.unimi.it/xoshiro256starstar.c), seeded by
// expanding the 64-bit user seed with splitmix64 as its authors recommend. Why not
// std::mt19937 + std::uniform_real_distribution: the engine is portable but the
// distributions are implementation-defined, so libstdc++ and libc++ give different
// tokens for the same seed. Every step below is specified here, nothing is delegated.
class Rng {
 public:
  explicit Rng(uint64_t seed) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& word : s_) word = splitmix64(x);
  }

  // Next raw 64-bit output.
  uint64_t next_u64() {
    ++draws_;
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform double in [0, 1): the top 53 bits scaled by 2^-53 — exact, every value is a
  // multiple of 2^-53 and 1.0 is never returned (Vigna's recommended conversion).
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Outputs taken since construction (not reset by reseed): lets tests and traces check
  // which stages consumed randomness.
  uint64_t draws() const { return draws_; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  // splitmix64 (Steele, Lea & Flood, OOPSLA 2014): advances x and returns one output.
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4] = {};
  uint64_t draws_ = 0;
};

}  // namespace minfer::sample
