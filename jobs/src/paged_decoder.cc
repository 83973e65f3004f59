#include "rasd/jobs/paged_decoder.h"

#include <fmt/format.h>

#include <algorithm>

namespace rasd::jobs {
namespace {

using drivers::KernelArg;

KernelArg Int(std::uint64_t value) { return KernelArg::Int(static_cast<std::int64_t>(value)); }

}  // namespace

Result<std::unique_ptr<PagedDecoder>> PagedDecoder::Create(runtime::Runtime& runtime, int device,
                                                           Options options) {
  const DecoderModel& model = options.model;
  if (model.vocab <= 0 || model.heads <= 0 || model.head_dim <= 0 || model.max_positions <= 0 ||
      options.max_batch_sequences == 0 || options.max_batch_tokens < options.max_batch_sequences) {
    return Fail(ErrorCode::kInvalidArgument,
                "the decoder needs a vocabulary, heads, positions, and room for a token per "
                "sequence in a step");
  }
  // The cache's geometry is checked, and the block tables sized, before
  // anything is allocated; Prepare lays the same blocks over the region
  // once it knows where it landed.
  auto blocks = KvBlockPool::Create({.base = 0,
                                     .bytes = options.kv_bytes,
                                     .block_bytes = BlockBytes(model, options.tokens_per_block),
                                     .tokens_per_block = options.tokens_per_block});
  if (!blocks) return Fail(blocks.error());
  std::unique_ptr<PagedDecoder> decoder(
      new PagedDecoder(runtime, device, std::move(options), std::move(*blocks)));
  if (auto prepared = decoder->Prepare(); !prepared) return Fail(prepared.error());
  return decoder;
}

PagedDecoder::PagedDecoder(runtime::Runtime& runtime, int device, Options options,
                           KvBlockPool blocks)
    : runtime_(runtime),
      device_(device),
      options_(std::move(options)),
      blocks_(std::move(blocks)),
      max_blocks_per_sequence_(static_cast<std::uint32_t>(
          blocks_.BlocksFor(static_cast<std::uint64_t>(options_.model.max_positions)))) {}

Status PagedDecoder::Prepare() {
  auto pool = runtime_.Pool(device_);
  if (!pool) return Fail(pool.error());
  auto stream = NewStream();
  if (!stream) return Fail(stream.error());
  stream_ = std::move(*stream);
  const DecoderModel& model = options_.model;
  const auto width = static_cast<std::uint64_t>(model.Width());
  const std::uint64_t sequences = options_.max_batch_sequences;
  const std::uint64_t tokens = options_.max_batch_tokens;
  // Page-aligned blocks: a page retired for a fault under a block then
  // costs blocks only, never a neighbouring buffer's bytes.
  auto found = runtime_.GetDevice(device_);
  if (!found) return Fail(found.error());
  const std::uint64_t page = std::max<std::uint64_t>((*found)->Properties().retire_granularity, 1);
  struct Buffer {
    runtime::Allocation* allocation;
    std::uint64_t bytes;
  };
  for (const Buffer& buffer : {
           Buffer{&wq_, width * width * sizeof(float)},
           Buffer{&wk_, width * width * sizeof(float)},
           Buffer{&wv_, width * width * sizeof(float)},
           Buffer{&wo_, width * static_cast<std::uint64_t>(model.vocab) * sizeof(float)},
           Buffer{&kv_, (options_.kv_bytes + page - 1) / page * page + page - 1},
           Buffer{&x_, tokens * width * sizeof(float)},
           Buffer{&k_new_, tokens * width * sizeof(float)},
           Buffer{&v_new_, tokens * width * sizeof(float)},
           Buffer{&x_last_, sequences * width * sizeof(float)},
           Buffer{&q_, sequences * width * sizeof(float)},
           Buffer{&attended_, sequences * width * sizeof(float)},
           Buffer{&hidden_, sequences * width * sizeof(float)},
           Buffer{&logits_, sequences * static_cast<std::uint64_t>(model.vocab) * sizeof(float)},
           Buffer{&k_slots_, tokens * sizeof(std::int64_t)},
           Buffer{&v_slots_, tokens * sizeof(std::int64_t)},
           Buffer{&tables_, sequences * max_blocks_per_sequence_ * sizeof(std::int64_t)},
           Buffer{&lengths_, sequences * sizeof(std::int64_t)},
       }) {
    auto allocation = (*pool)->Allocate(buffer.bytes, *stream_);
    if (!allocation) return Fail(allocation.error());
    *buffer.allocation = *allocation;
  }
  // The blocks are addressed where the region landed.
  kv_pages_base_ = (kv_.address + page - 1) / page * page;
  kv_pages_bytes_ = (options_.kv_bytes + page - 1) / page * page;
  auto blocks = KvBlockPool::Create({.base = kv_pages_base_,
                                     .bytes = options_.kv_bytes,
                                     .block_bytes = BlockBytes(),
                                     .tokens_per_block = options_.tokens_per_block});
  if (!blocks) return Fail(blocks.error());
  blocks_ = std::move(*blocks);
  embedding_ = model.Embedding();
  positions_ = model.Positions();
  const auto wq = model.Wq(), wk = model.Wk(), wv = model.Wv(), wo = model.Wo();
  for (auto [allocation, weights] : {std::pair{&wq_, &wq}, {&wk_, &wk}, {&wv_, &wv}, {&wo_, &wo}}) {
    if (auto copied = stream_->CopyToDevice(allocation->address, weights->data(),
                                            weights->size() * sizeof(float));
        !copied)
      return copied;
  }
  // The weights' host copies are locals: wait for them here.
  return stream_->Synchronize(std::chrono::seconds(30));
}

Result<std::unique_ptr<runtime::Stream>> PagedDecoder::NewStream() {
  return runtime_.CreateStream(
      device_, {.owner = options_.owner, .admission = runtime::Admission::kAdmittedJob});
}

PagedDecoder::~PagedDecoder() {
  if (!stream_) return;
  (void)stream_->Synchronize(std::chrono::seconds(5));
  if (auto pool = runtime_.Pool(device_)) {
    for (runtime::Allocation* allocation :
         {&wq_, &wk_, &wv_, &wo_, &kv_, &x_, &k_new_, &v_new_, &x_last_, &q_, &attended_, &hidden_,
          &logits_, &k_slots_, &v_slots_, &tables_, &lengths_}) {
      if (allocation->size > 0) (void)(*pool)->Free(*allocation);
    }
  }
  stream_.reset();  // waits for the work it was running, before the host buffers go
}

Result<std::vector<int>> PagedDecoder::Step(const std::vector<Work>& batch,
                                            std::chrono::milliseconds timeout) {
  const DecoderModel& model = options_.model;
  const auto width = static_cast<std::uint64_t>(model.Width());
  if (!Usable()) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("the decoder on device {} lost its stream", device_));
  }
  if (batch.empty()) return std::vector<int>{};
  if (batch.size() > options_.max_batch_sequences) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("{} sequences in one step; at most {}", batch.size(),
                            options_.max_batch_sequences));
  }
  std::uint64_t new_tokens = 0;
  for (const Work& work : batch) {
    const std::uint64_t cached = blocks_.Tokens(work.sequence);
    if (work.tokens.size() <= cached) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("sequence {} has no token that is not cached", work.sequence));
    }
    if (work.tokens.size() > static_cast<std::size_t>(model.max_positions)) {
      return Fail(ErrorCode::kInvalidArgument,
                  fmt::format("sequence {} is {} tokens long; the model holds {}", work.sequence,
                              work.tokens.size(), model.max_positions));
    }
    for (const int token : work.tokens) {
      if (token < 0 || token >= model.vocab) {
        return Fail(ErrorCode::kInvalidArgument,
                    fmt::format("token {} of sequence {} is not in the vocabulary of {}", token,
                                work.sequence, model.vocab));
      }
    }
    new_tokens += work.tokens.size() - cached;
  }
  if (new_tokens > options_.max_batch_tokens) {
    return Fail(ErrorCode::kInvalidArgument, fmt::format("{} new tokens in one step; at most {}",
                                                         new_tokens, options_.max_batch_tokens));
  }
  // The blocks first, all or none: a step that does not fit runs nothing.
  std::vector<std::uint64_t> cached(batch.size());
  for (std::size_t s = 0; s < batch.size(); ++s) cached[s] = blocks_.Tokens(batch[s].sequence);
  auto undo = [&](std::size_t grown) {
    for (std::size_t s = 0; s < grown; ++s) {
      if (cached[s] == 0) {
        blocks_.Release(batch[s].sequence);
      } else {
        blocks_.Truncate(batch[s].sequence, cached[s]);
      }
    }
  };
  for (std::size_t s = 0; s < batch.size(); ++s) {
    if (auto grown = blocks_.Grow(batch[s].sequence, batch[s].tokens.size() - cached[s]); !grown) {
      undo(s);
      return Fail(grown.error());
    }
  }

  // The inputs, the new tokens' cache slots, the block tables.
  const std::uint64_t tokens_per_block = options_.tokens_per_block;
  const std::uint64_t block_half = tokens_per_block * width * sizeof(float);
  host_x_.clear();
  host_x_last_.clear();
  host_k_slots_.clear();
  host_v_slots_.clear();
  host_tables_.assign(batch.size() * max_blocks_per_sequence_, 0);
  host_lengths_.clear();
  for (std::size_t s = 0; s < batch.size(); ++s) {
    const Work& work = batch[s];
    const auto table = blocks_.BlockTable(work.sequence);
    std::copy(table.begin(), table.end(), host_tables_.begin() + s * max_blocks_per_sequence_);
    host_lengths_.push_back(static_cast<std::int64_t>(work.tokens.size()));
    for (std::uint64_t position = cached[s]; position < work.tokens.size(); ++position) {
      const auto token = static_cast<std::uint64_t>(work.tokens[position]);
      for (std::uint64_t d = 0; d < width; ++d) {
        host_x_.push_back(embedding_[token * width + d] + positions_[position * width + d]);
      }
      const drivers::DeviceAddress block = table[position / tokens_per_block];
      const std::uint64_t row = (position % tokens_per_block) * width * sizeof(float);
      host_k_slots_.push_back(static_cast<std::int64_t>(block + row));
      host_v_slots_.push_back(static_cast<std::int64_t>(block + block_half + row));
    }
    host_x_last_.insert(host_x_last_.end(), host_x_.end() - static_cast<std::ptrdiff_t>(width),
                        host_x_.end());
  }
  const std::uint64_t sequences = batch.size();
  const std::uint64_t vocab = static_cast<std::uint64_t>(model.vocab);
  host_logits_.assign(sequences * vocab, 0.0f);

  auto run = [&]() -> Status {
    for (auto [dst, src, bytes] :
         {std::tuple{x_.address, static_cast<const void*>(host_x_.data()),
                     host_x_.size() * sizeof(float)},
          {x_last_.address, host_x_last_.data(), host_x_last_.size() * sizeof(float)},
          {k_slots_.address, host_k_slots_.data(), host_k_slots_.size() * sizeof(std::int64_t)},
          {v_slots_.address, host_v_slots_.data(), host_v_slots_.size() * sizeof(std::int64_t)},
          {tables_.address, host_tables_.data(), host_tables_.size() * sizeof(std::int64_t)},
          {lengths_.address, host_lengths_.data(), host_lengths_.size() * sizeof(std::int64_t)}}) {
      if (auto copied = stream_->CopyToDevice(dst, src, bytes); !copied) return copied;
    }
    using A = KernelArg;
    const std::vector<std::pair<const char*, std::vector<KernelArg>>> kernels = {
        {"gemm",
         {Int(new_tokens), Int(width), Int(width), A::Address(x_.address), A::Address(wk_.address),
          A::Address(k_new_.address)}},
        {"gemm",
         {Int(new_tokens), Int(width), Int(width), A::Address(x_.address), A::Address(wv_.address),
          A::Address(v_new_.address)}},
        {"kv_store",
         {Int(new_tokens), Int(width), A::Address(k_new_.address), A::Address(v_new_.address),
          A::Address(k_slots_.address), A::Address(v_slots_.address)}},
        {"gemm",
         {Int(sequences), Int(width), Int(width), A::Address(x_last_.address),
          A::Address(wq_.address), A::Address(q_.address)}},
        {"paged_attention",
         {Int(sequences), Int(static_cast<std::uint64_t>(model.heads)),
          Int(static_cast<std::uint64_t>(model.head_dim)), Int(tokens_per_block),
          Int(max_blocks_per_sequence_), A::Address(q_.address), A::Address(tables_.address),
          A::Address(lengths_.address), A::Address(attended_.address)}},
        {"add",
         {Int(sequences * width), A::Address(attended_.address), A::Address(x_last_.address),
          A::Address(hidden_.address)}},
        {"gemm",
         {Int(sequences), Int(vocab), Int(width), A::Address(hidden_.address),
          A::Address(wo_.address), A::Address(logits_.address)}},
    };
    for (const auto& [kernel, args] : kernels) {
      if (auto launched = stream_->Launch(kernel, args); !launched) return launched;
    }
    if (auto copied = stream_->CopyToHost(host_logits_.data(), logits_.address,
                                          host_logits_.size() * sizeof(float));
        !copied)
      return copied;
    return stream_->Synchronize(timeout);
  };
  if (auto ran = run(); !ran) {
    undo(batch.size());
    RecoverStream(ran.error().code);
    return Fail(ran.error());
  }
  std::vector<int> next;
  next.reserve(batch.size());
  for (std::uint64_t s = 0; s < sequences; ++s) {
    const auto row = host_logits_.begin() + static_cast<std::ptrdiff_t>(s * vocab);
    next.push_back(
        static_cast<int>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row));
  }
  return next;
}

void PagedDecoder::RecoverStream(ErrorCode failure) {
  if (failure == ErrorCode::kTimeout) {
    broken_ = true;  // the work may still be running on the old stream
  } else if (auto stream = NewStream()) {
    stream_ = std::move(*stream);  // the old one's error is sticky
  } else {
    broken_ = true;
  }
}

std::uint64_t PagedDecoder::BlockBytes() const {
  return BlockBytes(options_.model, options_.tokens_per_block);
}

std::uint64_t PagedDecoder::BlockBytes(const DecoderModel& model, std::uint32_t tokens_per_block) {
  return 2ull * tokens_per_block * static_cast<std::uint64_t>(model.Width()) * sizeof(float);
}

Result<PagedDecoder::SwappedKv> PagedDecoder::SwapOut(SequenceId sequence,
                                                      std::chrono::milliseconds timeout) {
  if (!Usable()) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("the decoder on device {} lost its stream", device_));
  }
  const auto table = blocks_.BlockTable(sequence);
  if (table.empty()) {
    return Fail(ErrorCode::kNotFound, fmt::format("sequence {} has nothing cached", sequence));
  }
  const std::uint64_t block_bytes = BlockBytes();
  SwappedKv swapped{.tokens = blocks_.Tokens(sequence),
                    .bytes = std::vector<std::byte>(table.size() * block_bytes)};
  auto copy = [&]() -> Status {
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (auto copied =
              stream_->CopyToHost(swapped.bytes.data() + i * block_bytes, table[i], block_bytes);
          !copied)
        return copied;
    }
    return stream_->Synchronize(timeout);
  };
  if (auto copied = copy(); !copied) {
    RecoverStream(copied.error().code);
    // After a timeout the copy may still be writing into the host buffer.
    if (broken_) abandoned_.push_back(std::move(swapped.bytes));
    return Fail(copied.error());
  }
  blocks_.Release(sequence);
  return swapped;
}

Status PagedDecoder::SwapIn(SequenceId sequence, SwappedKv swapped,
                            std::chrono::milliseconds timeout) {
  if (!Usable()) {
    return Fail(ErrorCode::kUnavailable,
                fmt::format("the decoder on device {} lost its stream", device_));
  }
  const std::uint64_t block_bytes = BlockBytes();
  if (blocks_.Tokens(sequence) != 0 || swapped.tokens == 0 ||
      swapped.bytes.size() != blocks_.BlocksFor(swapped.tokens) * block_bytes) {
    return Fail(ErrorCode::kInvalidArgument,
                fmt::format("sequence {} cannot take a swapped cache of {} tokens in {} bytes",
                            sequence, swapped.tokens, swapped.bytes.size()));
  }
  if (auto grown = blocks_.Grow(sequence, swapped.tokens); !grown) return grown;
  const auto table = blocks_.BlockTable(sequence);
  auto copy = [&]() -> Status {
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (auto copied =
              stream_->CopyToDevice(table[i], swapped.bytes.data() + i * block_bytes, block_bytes);
          !copied)
        return copied;
    }
    return stream_->Synchronize(timeout);
  };
  if (auto copied = copy(); !copied) {
    blocks_.Release(sequence);
    RecoverStream(copied.error().code);
    if (broken_) abandoned_.push_back(std::move(swapped.bytes));  // the copy may still read it
    return Fail(copied.error());
  }
  return {};
}

}  // namespace rasd::jobs
