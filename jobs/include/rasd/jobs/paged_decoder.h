#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rasd/common/result.h"
#include "rasd/jobs/decoder_model.h"
#include "rasd/jobs/kv_block_pool.h"
#include "rasd/runtime/runtime.h"

namespace rasd::jobs {

// One replica of the decoder on one device: its weights, its paged KV cache
// (one allocation of the device's memory pool, cut into KvBlockPool blocks)
// and one stream. A step runs a batch of sequences, each at prefill (its
// prompt not cached yet) or decode (one new token), in one pass of kernels
// (continuous batching: sequences join and leave between steps), and gives
// each its next token.
//
// The caller owns the sequences: each step names every token a sequence
// has so far (prompt and generated), and the tokens past those cached are
// the step's new ones. So a sequence whose cache was lost (RetirePage, a
// preemption) is recomputed by the next step that names it: its whole
// history is new again, prefilled on healthy blocks.
//
// Not thread-safe: one inference replica's thread owns it. Destroying it
// waits for its stream's work (the host buffers that work copies from stay
// alive until then) and returns its memory to the pool.
class PagedDecoder {
 public:
  struct Options {
    DecoderModel model;
    std::string owner = "llm";  // the job id: owner of the stream and the memory
    std::uint64_t kv_bytes = 1 << 20;
    std::uint32_t tokens_per_block = 16;
    std::uint32_t max_batch_sequences = 64;
    std::uint32_t max_batch_tokens = 2048;  // new tokens in one step, prefills included
  };
  // Errors: the pool's and the stream's (kOutOfMemory, kDeviceIsolated...),
  // kInvalidArgument for options that hold no block or no token.
  static Result<std::unique_ptr<PagedDecoder>> Create(runtime::Runtime& runtime, int device,
                                                      Options options);
  ~PagedDecoder();
  PagedDecoder(const PagedDecoder&) = delete;
  PagedDecoder& operator=(const PagedDecoder&) = delete;

  struct Work {
    SequenceId sequence = 0;
    std::vector<int> tokens;  // every token of the sequence so far; at least one not cached
  };
  // One step. Each sequence's blocks are grown for its new tokens first;
  // when the free blocks do not suffice, kOutOfMemory and nothing runs
  // (the caller preempts and asks again). A step that fails on the device
  // (a poisoned read: kDeviceFault; an abort: kAborted; kTimeout) leaves
  // every sequence's cache as it was before the step, and the replica goes
  // on with a new stream (a stream's error is sticky, as CUDA's is); the
  // KV cache's memory stays. After a kTimeout the old stream may still run
  // the step, and when no new stream can be had (the device isolated) there
  // is none: Usable() is false from then on, and the replica is to be
  // destroyed (its sequences recomputed elsewhere).
  // kInvalidArgument for a batch too large, a token out of the vocabulary,
  // a sequence longer than the model's positions, or no new token.
  Result<std::vector<int>> Step(const std::vector<Work>& batch, std::chrono::milliseconds timeout);

  // A preempted sequence's cache held on the host (preemption by swap, as
  // LLM engines do it): its blocks' bytes, in token order. Any decoder of
  // the same model and block size takes it back.
  struct SwappedKv {
    std::uint64_t tokens = 0;
    std::vector<std::byte> bytes;
  };
  // Copies `sequence`'s blocks to the host and frees them. A copy that
  // fails (a poisoned block: kDeviceFault; kTimeout as for Step) frees
  // nothing, and the decoder goes on with a new stream as after a failed
  // step: the caller recomputes the sequence instead. kNotFound for a
  // sequence with nothing cached.
  Result<SwappedKv> SwapOut(SequenceId sequence, std::chrono::milliseconds timeout);
  // Gives `sequence` (one with nothing cached here) blocks for `swapped`'s
  // tokens and copies them back. On any error the host copy is gone (the
  // caller recomputes the sequence): kOutOfMemory, with nothing taken,
  // when the free blocks do not suffice; a failed copy frees the blocks it
  // took, and the decoder goes on as after a failed step.
  Status SwapIn(SequenceId sequence, SwappedKv swapped, std::chrono::milliseconds timeout);

  bool Usable() const { return stream_ != nullptr && !broken_; }
  // The sequence ends: its blocks return to the free list.
  void Release(SequenceId sequence) { blocks_.Release(sequence); }
  KvBlockPool& Blocks() { return blocks_; }
  const KvBlockPool& Blocks() const { return blocks_; }
  int Device() const { return device_; }
  // The device pages the blocks lie on, [KvPagesBase(), + KvPagesBytes()):
  // page-aligned, inside the KV cache's allocation (a page larger, and
  // rounded up to pages), so they hold blocks and nothing else. A fault on
  // one of them costs blocks (Blocks().RetirePage) and never another
  // buffer; a fault on the allocation's slack outside them is not the
  // cache's to contain (that page may hold a neighbouring buffer).
  drivers::DeviceAddress KvPagesBase() const { return kv_pages_base_; }
  std::uint64_t KvPagesBytes() const { return kv_pages_bytes_; }
  // One block: tokens_per_block tokens' keys, then their values.
  std::uint64_t BlockBytes() const;
  static std::uint64_t BlockBytes(const DecoderModel& model, std::uint32_t tokens_per_block);

 private:
  PagedDecoder(runtime::Runtime& runtime, int device, Options options, KvBlockPool blocks);
  Status Prepare();
  Result<std::unique_ptr<runtime::Stream>> NewStream();
  // After work on the stream failed: a new stream, or broken_ when the old
  // one may still run (a timeout) or none can be had.
  void RecoverStream(ErrorCode failure);

  runtime::Runtime& runtime_;
  int device_;
  Options options_;
  KvBlockPool blocks_;
  std::uint32_t max_blocks_per_sequence_;
  // Device buffers: weights, the KV region, and a step's scratch. The
  // embeddings stay on the host: a step's input rows are built there.
  runtime::Allocation wq_, wk_, wv_, wo_, kv_;
  drivers::DeviceAddress kv_pages_base_ = 0;
  std::uint64_t kv_pages_bytes_ = 0;
  runtime::Allocation x_, k_new_, v_new_, x_last_, q_, attended_, hidden_, logits_;
  runtime::Allocation k_slots_, v_slots_, tables_, lengths_;
  // Host buffers a step copies from and to: members, so that they outlive
  // any copy still queued (the stream, declared after them, goes first).
  std::vector<float> embedding_, positions_;
  std::vector<float> host_x_, host_x_last_, host_logits_;
  std::vector<std::int64_t> host_k_slots_, host_v_slots_, host_tables_, host_lengths_;
  // Host buffers of swap-outs whose copy timed out: the old stream may
  // still write them.
  std::vector<std::vector<std::byte>> abandoned_;
  std::unique_ptr<runtime::Stream> stream_;
  bool broken_ = false;
};

}  // namespace rasd::jobs
