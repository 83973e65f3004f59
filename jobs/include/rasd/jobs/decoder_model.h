#pragma once

#include <cstdint>
#include <vector>

namespace rasd::jobs {

// A one-layer, decoder-only language model with fixed, seeded weights, fp32:
// the model of the LLM service, small enough for the CPU simulator and
// shaped as the engines' are where it matters to rasd: its keys and values
// are cached per token, in the paged KV cache, and every new token attends
// over all of them.
//
// For a token t at position p: x = E[t] + P[p]; k = x Wk, v = x Wv go to
// the cache. The last token's q = x Wq attends over the cache (multi-head,
// scores scaled by 1/sqrt(head_dim)), h = attention + x, logits = h Wo, and
// the next token is the first largest logit (greedy). With one layer, a
// prompt's earlier positions need their keys and values only: prefill
// stores them all and attends from the last one.
struct DecoderModel {
  int vocab = 64;
  int heads = 2;
  int head_dim = 16;
  int max_positions = 512;  // tokens a sequence may hold, prompt included
  std::uint64_t seed = 7;

  int Width() const { return heads * head_dim; }
  std::vector<float> Embedding() const;  // vocab x width
  std::vector<float> Positions() const;  // max_positions x width
  std::vector<float> Wq() const;         // width x width
  std::vector<float> Wk() const;         // width x width
  std::vector<float> Wv() const;         // width x width
  std::vector<float> Wo() const;         // width x vocab

  // The next token after `tokens` (a prompt and the tokens generated so
  // far), computed on the host in the order the simulator's kernels sum
  // (gemm over k ascending, attention as paged_attention): the reference a
  // served answer must equal, token for token.
  int ReferenceNextToken(const std::vector<int>& tokens) const;
  // `count` tokens generated greedily after `prompt`.
  std::vector<int> ReferenceGenerate(std::vector<int> prompt, int count) const;
};

}  // namespace rasd::jobs
