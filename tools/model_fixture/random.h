// Tools (fixtures): the documented pseudo-random generator behind minfer-model-fixture.
// Invariant: the value of element i of a tensor depends only on (seed, tensor name, i)
// and is computed with integer arithmetic plus IEEE-754 operations that every
// conforming platform rounds identically (no libm, no FMA contraction: this file's
// translation unit is built with -ffp-contract=off), so a fixture's bytes are the same
// on every machine, for any thread count.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace minfer::fixture {

// Generator version, written into the model's general.description: bump it whenever a
// change below alters any produced value (committed hashes then change too).
constexpr int kGeneratorVersion = 1;

// splitmix64 (Steele, Lea, Flood 2014; the reference constants of Vigna's
// splitmix64.c): output n of a stream started at `state` is mix(state + n * kGamma).
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a 64-bit of the tensor name: separates the streams of different tensors.
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// Stream origin for one tensor of one model.
constexpr uint64_t tensor_stream(uint64_t seed, std::string_view tensor_name) {
  return splitmix64_mix(seed ^ splitmix64_mix(fnv1a64(tensor_name)));
}

// A unit-variance, zero-mean, bell-shaped value for element `index` of the stream:
// Irwin–Hall sum of four 53-bit uniforms (outputs 4i+1 .. 4i+4), centred and scaled
// by sqrt(3) — chosen over Box–Muller because Box–Muller needs log/cos, whose last
// bit may differ between libm versions, which would change a committed hash. The
// tails end at ±2·sqrt(3) ≈ ±3.46 standard deviations.
double unit_normal(uint64_t stream, uint64_t index);

// dst[k] = mean + std * unit_normal(stream, first + k), rounded to float.
void fill_normal(uint64_t stream, uint64_t first, double mean, double std, std::span<float> dst);

}  // namespace minfer::fixture
