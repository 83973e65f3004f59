#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace rasd::jobs {

// `count` weights drawn uniformly from [-scale, scale) by a generator seeded
// with `seed`: the same values on every run, so that a served answer can be
// compared with the host's reference bit for bit.
inline std::vector<float> SeededWeights(std::size_t count, std::uint64_t seed, float scale) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> weights(count);
  for (auto& weight : weights) weight = uniform(random);
  return weights;
}

}  // namespace rasd::jobs
