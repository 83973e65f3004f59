#include "rasd/jobs/decoder_model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "seeded_weights.h"

namespace rasd::jobs {
namespace {

std::size_t Size(int value) { return static_cast<std::size_t>(value); }

// row (1 x k) times matrix (k x n), summed over k ascending as the
// simulator's gemm does.
std::vector<float> RowTimes(const std::vector<float>& row, const std::vector<float>& matrix, int k,
                            int n) {
  std::vector<float> out(Size(n), 0.0f);
  for (int p = 0; p < k; ++p) {
    const float a = row[Size(p)];
    for (int j = 0; j < n; ++j) out[Size(j)] += a * matrix[Size(p) * Size(n) + Size(j)];
  }
  return out;
}

}  // namespace

std::vector<float> DecoderModel::Embedding() const {
  return SeededWeights(Size(vocab) * Size(Width()), seed, 1.0f);
}

std::vector<float> DecoderModel::Positions() const {
  return SeededWeights(Size(max_positions) * Size(Width()), seed + 1, 0.5f);
}

std::vector<float> DecoderModel::Wq() const {
  return SeededWeights(Size(Width()) * Size(Width()), seed + 2, 2.0f / std::sqrt(float(Width())));
}

std::vector<float> DecoderModel::Wk() const {
  return SeededWeights(Size(Width()) * Size(Width()), seed + 3, 2.0f / std::sqrt(float(Width())));
}

std::vector<float> DecoderModel::Wv() const {
  return SeededWeights(Size(Width()) * Size(Width()), seed + 4, 1.0f / std::sqrt(float(Width())));
}

std::vector<float> DecoderModel::Wo() const {
  return SeededWeights(Size(Width()) * Size(vocab), seed + 5, 1.0f / std::sqrt(float(Width())));
}

int DecoderModel::ReferenceNextToken(const std::vector<int>& tokens) const {
  const int width = Width();
  const auto embedding = Embedding(), positions = Positions();
  const auto wq = Wq(), wk = Wk(), wv = Wv(), wo = Wo();
  auto input = [&](std::size_t position) {
    std::vector<float> x(Size(width));
    const auto token = Size(tokens[position]);
    for (std::size_t d = 0; d < x.size(); ++d)
      x[d] = embedding[token * Size(width) + d] + positions[position * Size(width) + d];
    return x;
  };
  std::vector<std::vector<float>> keys, values;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const auto x = input(t);
    keys.push_back(RowTimes(x, wk, width, width));
    values.push_back(RowTimes(x, wv, width, width));
  }
  const auto x = input(tokens.size() - 1);
  const auto q = RowTimes(x, wq, width, width);
  // Attention, per head, in paged_attention's order.
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> attended(Size(width), 0.0f), scores(tokens.size());
  for (int h = 0; h < heads; ++h) {
    const std::size_t offset = Size(h) * Size(head_dim);
    float max = -std::numeric_limits<float>::infinity();
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      float dot = 0.0f;
      for (std::size_t d = 0; d < Size(head_dim); ++d) dot += q[offset + d] * keys[t][offset + d];
      scores[t] = dot * scale;
      max = std::max(max, scores[t]);
    }
    double sum = 0;
    for (auto& score : scores) {
      score = std::exp(score - max);
      sum += score;
    }
    const float norm = static_cast<float>(1.0 / sum);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const float weight = scores[t] * norm;
      for (std::size_t d = 0; d < Size(head_dim); ++d)
        attended[offset + d] += weight * values[t][offset + d];
    }
  }
  std::vector<float> hidden(Size(width));
  for (std::size_t d = 0; d < hidden.size(); ++d) hidden[d] = attended[d] + x[d];
  const auto logits = RowTimes(hidden, wo, width, vocab);
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<int> DecoderModel::ReferenceGenerate(std::vector<int> prompt, int count) const {
  std::vector<int> generated;
  for (int i = 0; i < count; ++i) {
    generated.push_back(ReferenceNextToken(prompt));
    prompt.push_back(generated.back());
  }
  return generated;
}

}  // namespace rasd::jobs
