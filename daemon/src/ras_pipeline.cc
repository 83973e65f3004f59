#include "ras_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "rasd/common/logging.h"

namespace rasd::daemon {

namespace {
constexpr std::uint64_t kMaxEventCount = std::uint64_t{1} << 40;
}  // namespace

namespace {

// "0000:07:00.0", "07:00.0" and "0000:07:00" (as Xid lines print it) name
// the same device: compare domain, bus and device, and the function when
// both give one.
bool SamePciDevice(std::string_view a, std::string_view b) {
  auto normalize = [](std::string_view bdf) {
    std::string text;
    for (char c : bdf) text += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::count(text.begin(), text.end(), ':') == 1) text = "0000:" + text;
    return text;
  };
  const std::string left = normalize(a), right = normalize(b);
  if (left.size() < 10 || right.size() < 10) return false;
  if (left.compare(0, 10, right, 0, 10) != 0) return false;
  const auto left_function = left.find('.'), right_function = right.find('.');
  if (left_function == std::string::npos || right_function == std::string::npos) return true;
  return left.substr(left_function) == right.substr(right_function);
}

constexpr int kMaxLoggedPerSecond = 20;

std::string Describe(const ras::RasEvent& event) {
  std::string detail;
  if (event.device) detail += fmt::format(" device={}", *event.device);
  if (event.vendor_code) detail += fmt::format(" code={}", *event.vendor_code);
  if (event.pci_bdf) detail += " pci=" + *event.pci_bdf;
  if (event.mc) detail += fmt::format(" mc={}", *event.mc);
  if (event.address) detail += " addr=" + event.address->printed;
  if (event.count > 1) detail += fmt::format(" count={}", event.count);
  if (event.historical) detail += " previous-boot";
  if (event.before_start) detail += " before-start";
  return fmt::format("{} {}{}: {}", ras::SeverityName(event.severity), event.origin, detail,
                     event.summary);
}

}  // namespace

namespace {
constexpr auto kPrunePeriod = std::chrono::hours(1);
}  // namespace

RasPipeline::RasPipeline(common::EventLoop& loop, runtime::Runtime& runtime,
                         ras::PolicyEngine& policy, Actuator& actuator, DeviceHealth& health,
                         ras::StateStore& store, Options options)
    : loop_(loop),
      runtime_(runtime),
      policy_(policy),
      actuator_(actuator),
      health_(health),
      store_(store),
      options_(options),
      retry_timer_(loop.CreateTimer([this] { FlushBacklog(); })),
      checkpoint_timer_(loop.CreateTimer([this] {
        // Quiet: nothing is written meanwhile, so a checkpoint elsewhere
        // copies it all and the next commit starts the log over.
        if (checkpointer_) {
          checkpointer_->Request();
        } else {
          CheckpointOnLoop();
        }
      })) {
  health_.SetUnsavedCallback([this] { ArmRetry(); });
  // What a storm's end left unsaved: now, or with the backlog's commit.
  pages_timer_ = loop_.CreateTimer([this] { CommitDecisions(); });
  Prune();
  prune_timer_ = loop_.CreateTimer([this] {
    Prune();
    prune_timer_->ArmAfter(kPrunePeriod);
  });
  prune_timer_->ArmAfter(kPrunePeriod);
}

RasPipeline::~RasPipeline() {
  if (!PagesWaiting()) return;
  ras::StoreBatch batch;
  TakePages(batch);
  if (auto stored = store_.Commit(batch); !stored)
    RASD_LOG_WARN("page errors of the last second not saved: {}", stored.error().message);
}

void RasPipeline::TakePages(ras::StoreBatch& batch) {
  if (!batch.page_errors) batch.page_errors.emplace();
  if (!PagesWaiting()) return;
  auto pages = unsaved_pages_.Take();
  batch.page_errors->insert(batch.page_errors->end(),
                            std::make_move_iterator(saving_pages_.begin()),
                            std::make_move_iterator(saving_pages_.end()));
  saving_pages_.clear();
  batch.page_errors->insert(batch.page_errors->end(), std::make_move_iterator(pages.begin()),
                            std::make_move_iterator(pages.end()));
  pages_saved_at_ = loop_.Now();
  pages_timer_->Disarm();
}

void RasPipeline::TakeSomePages(ras::StoreBatch& batch) {
  if (saving_pages_.empty()) saving_pages_ = unsaved_pages_.Take();  // the second's sums
  const std::size_t count = std::min(saving_pages_.size(), kPagesPerBatch);
  batch.page_errors.emplace(std::make_move_iterator(saving_pages_.begin()),
                            std::make_move_iterator(saving_pages_.begin() + count));
  saving_pages_.erase(saving_pages_.begin(), saving_pages_.begin() + count);
  if (saving_pages_.empty()) pages_saved_at_ = loop_.Now();
  if (!pages_timer_->Armed()) pages_timer_->ArmAfter(kPagesSavePeriod);  // should the storm end
}

void RasPipeline::Prune() {
  const auto cutoff = loop_.GetClock().Wall() - std::chrono::hours(24) * options_.retention_days;
  auto removed = store_.Prune(cutoff, options_.max_events);
  if (!removed) {
    RASD_LOG_WARN("event retention: {}", removed.error().message);
    return;
  }
  stats_.pruned += *removed;
  if (*removed > 0)
    RASD_LOG_INFO("event retention: {} old event(s) rolled up by day and deleted", *removed);
}

namespace {

// `row` replaces the row of `kept` with the same key, or joins them.
template <typename Row>
void KeepLatest(std::vector<Row>& kept, Row row, std::string Row::*key) {
  auto same =
      std::find_if(kept.begin(), kept.end(), [&](const Row& old) { return old.*key == row.*key; });
  if (same != kept.end()) {
    *same = std::move(row);
  } else {
    kept.push_back(std::move(row));
  }
}

// The batches as one, in order: action rows keep pointing at their events.
ras::StoreBatch Merge(std::deque<ras::StoreBatch>& batches) {
  // Every batch names its page errors (Handle and FlushBacklog set them;
  // the empty batch FlushBacklog adds has no events).
  ras::StoreBatch merged = std::move(batches.front());
  batches.pop_front();
  for (auto& batch : batches) {
    const std::size_t offset = merged.events.size();
    for (auto& event : batch.events) merged.events.push_back(std::move(event));
    for (auto& action : batch.actions) {
      if (action.event_index) *action.event_index += offset;
      merged.actions.push_back(std::move(action));
    }
    for (auto& state : batch.states) merged.states.push_back(std::move(state));
    for (auto& page : batch.pages) merged.pages.push_back(std::move(page));
    if (batch.page_errors) {
      if (!merged.page_errors) merged.page_errors.emplace();
      merged.page_errors->insert(merged.page_errors->end(), batch.page_errors->begin(),
                                 batch.page_errors->end());
    }
    // The latest value of each key, and position of each source, is the one to keep.
    for (auto& value : batch.node_values)
      KeepLatest(merged.node_values, std::move(value), &ras::NodeValue::key);
    for (auto& cursor : batch.cursors)
      KeepLatest(merged.cursors, std::move(cursor), &ras::SourceCursor::source);
  }
  batches.clear();
  return merged;
}

std::size_t EventsIn(const std::deque<ras::StoreBatch>& batches) {
  std::size_t events = 0;
  for (const auto& batch : batches) events += batch.events.size();
  return events;
}

}  // namespace

void RasPipeline::AfterCommit() {
  constexpr std::size_t kCheckpointPages = 2048;  // 8 MiB of 4 KiB pages
  if (store_.WalPages() > kCheckpointPages) {
    checkpoint_timer_->Disarm();
    if (!checkpointer_) {
      CheckpointOnLoop();
    } else if (!bulk_requested_) {
      finished_before_bulk_ = checkpointer_->Finished();
      checkpointer_->Request();
      bulk_requested_ = true;
    } else if (checkpointer_->Finished() > finished_before_bulk_) {
      const auto copied = checkpointer_->LastCopied();
      const std::size_t left =
          copied ? store_.WalPages() - std::min(store_.WalPages(), *copied) : store_.WalPages();
      if (!copied || left <= kLoopCheckpointPages) {
        // What was written since the bulk was copied; all of it where the
        // thread's failed (the loop's says why).
        CheckpointOnLoop();
        bulk_requested_ = false;
      } else {
        finished_before_bulk_ = checkpointer_->Finished();  // another bulk first
        checkpointer_->Request();
      }
    }
    return;
  }
  bulk_requested_ = false;
  checkpoint_timer_->ArmAfter(std::chrono::seconds(1));
}

void RasPipeline::CheckpointOnLoop() {
  if (auto done = store_.Checkpoint(); !done)
    RASD_LOG_WARN("state store: {}", done.error().message);
}

void RasPipeline::ArmRetry() {
  if (!retry_timer_->Armed()) retry_timer_->ArmAfter(retry_delay_);
}

void RasPipeline::Bound() {
  if (EventsIn(backlog_) <= kMaxBacklogEvents) return;
  ras::StoreBatch merged = Merge(backlog_);
  // Coalescing renumbers the events: the actions keep everything but the
  // link to their event's row.
  merged.events = ras::CoalesceStorm(std::move(merged.events), 0);
  for (auto& action : merged.actions) action.event_index.reset();
  if (merged.events.size() > kMaxBacklogEvents) {
    const std::size_t excess = merged.events.size() - kMaxBacklogEvents;
    std::uint64_t errors = 0;
    for (std::size_t i = 0; i < excess; ++i) errors += merged.events[i].count;
    merged.events.erase(merged.events.begin(),
                        merged.events.begin() + static_cast<std::ptrdiff_t>(excess));
    stats_.dropped_events += errors;
    RASD_LOG_ERROR("store backlog full: {} event(s) ({} error(s)) dropped, oldest first", excess,
                  errors);
  }
  backlog_.push_back(std::move(merged));
}

void RasPipeline::NoteFailure(const ras::StoreBatch& batch, const Error& error) {
  ++stats_.store_failures;
  if (stats_.store_ok) {
    failing_since_ = loop_.Now();
    RASD_LOG_ERROR("cannot store {} RAS event(s) and {} action(s): {}; keeping them and retrying",
                  batch.events.size(), batch.actions.size(), error.message);
  }
  stats_.store_ok = false;
}

void RasPipeline::FlushBacklog() {
  if (backlog_.empty()) {
    // Only decisions made outside a batch wait (an operator's change whose
    // save failed, a link's debounce ending).
    if (health_.UnsavedStates() == 0 && !(link_decider_ && link_decider_->HasPending()) &&
        !PagesWaiting())
      return;
    backlog_.emplace_back();
  }
  ras::StoreBatch merged = Merge(backlog_);
  // The device states waiting there may be older than one saved since (an
  // operator's, committed at once): DeviceHealth gives the current row of
  // every device not saved yet instead.
  merged.states.clear();
  TakePending(merged);
  TakePages(merged);
  if (auto stored = store_.Commit(merged); !stored) {
    NoteFailure(merged, stored.error());
    backlog_.push_back(std::move(merged));
    retry_delay_ = std::min<std::chrono::milliseconds>(retry_delay_ * 2, std::chrono::seconds(10));
    ArmRetry();
  } else {
    health_.Committed();
    AfterCommit();
    // Its rows may grow from now on, but for those its actions point at.
    std::vector<bool> acted(merged.events.size(), false);
    for (const auto& action : merged.actions)
      if (action.event_index && *action.event_index < acted.size())
        acted[*action.event_index] = true;
    OpenStored(merged, acted, stored->event_ids);
    if (!stats_.store_ok) {
      RASD_LOG_WARN("store writable again after {:.1f} s: {} queued event(s) stored",
                   std::chrono::duration<double>(loop_.Now() - failing_since_).count(),
                   merged.events.size());
    }
    stats_.store_ok = true;
    retry_delay_ = std::chrono::milliseconds(100);
    retry_timer_->Disarm();
  }
  stats_.backlog_batches = backlog_.size();
  stats_.backlog_events = EventsIn(backlog_);
}

std::optional<int> RasPipeline::DeviceAtPciAddress(const runtime::Runtime& runtime,
                                                   std::string_view bdf) {
  for (const auto& device : runtime.Devices()) {
    const auto& at = device->Properties().pci_bdf;
    if (!at.empty() && SamePciDevice(at, bdf)) return device->Index();
  }
  return std::nullopt;
}

void RasPipeline::AttributeToDevices(std::vector<ras::RasEvent>& events) const {
  for (auto& event : events) {
    if (event.device || !event.pci_bdf || event.historical) continue;
    event.device = DeviceAtPciAddress(runtime_, *event.pci_bdf);
  }
}

std::vector<std::size_t> SplitActedPages(std::vector<ras::RasEvent>& events, std::size_t index,
                                         const std::vector<ras::Action>& actions,
                                         const std::function<bool(const ras::Action&)>& acts) {
  std::vector<std::size_t> owners(actions.size(), index);
  if (events[index].pages.empty()) return owners;
  std::vector<std::pair<std::uint64_t, std::size_t>> split;  // page, its event
  for (std::size_t k = 0; k < actions.size(); ++k) {
    const ras::Action& action = actions[k];
    if (!action.address || !acts(action)) continue;
    const std::uint64_t page = ras::PageOf(*action.address);
    if (auto done = std::find_if(split.begin(), split.end(),
                                 [page](const auto& entry) { return entry.first == page; });
        done != split.end()) {
      owners[k] = done->second;
      continue;
    }
    ras::RasEvent& merged = events[index];
    auto at = std::find_if(merged.pages.begin(), merged.pages.end(),
                           [page](const ras::PageErrors& entry) { return entry.page == page; });
    if (at == merged.pages.end()) continue;
    if (merged.pages.size() == 1) {
      // The last page left: the event itself becomes that page's.
      merged.address = ras::Address::Of(page);
      merged.pages.clear();
      split.emplace_back(page, index);
      continue;
    }
    ras::RasEvent own = merged;
    own.pages.clear();
    own.address = ras::Address::Of(page);
    own.count = at->errors;
    own.summary =
        fmt::format("{} error(s) on page 0x{:x} of: {}", at->errors, page, merged.summary);
    merged.count -= at->errors;
    merged.pages.erase(at);
    if (merged.pages.size() == 1) {
      merged.address = ras::Address::Of(merged.pages.front().page);
      merged.pages.clear();
    }
    events.push_back(std::move(own));
    owners[k] = events.size() - 1;
    split.emplace_back(page, owners[k]);
  }
  return owners;
}

void RasPipeline::TakePending(ras::StoreBatch& batch) {
  actuator_.TakePending(batch);
  // The link policy's state before the holds: taking it may not decide,
  // but its decisions were made before this.
  if (link_decider_) link_decider_->TakePending(batch);
  health_.TakePending(batch);
}

void RasPipeline::CommitDecisions() {
  if (!backlog_.empty()) {
    ArmRetry();
    return;
  }
  FlushBacklog();
}

namespace {

// Whether `event` repeats, within the same fault rule's window, the event
// that opened it (`first`): SameComponent takes a window's first event and
// its repeats for one.
bool InSameWindow(const ras::RasEvent& first, const ras::RasEvent& event) {
  return first.context.window_start && ras::SameComponent(first, event);
}

// A repeat whose window's first event is in the same batch joins it: one
// event, decided once with the count of all, as a storm's batch is through
// CoalesceStorm. Returns how many were folded.
std::size_t FoldRepeats(std::vector<ras::RasEvent>& events) {
  std::vector<std::size_t> openers;  // in `kept`
  std::vector<ras::RasEvent> kept;
  kept.reserve(events.size());
  for (auto& event : events) {
    if (event.context.kind == ras::FaultContext::Kind::kRepeat) {
      auto opener = std::find_if(openers.begin(), openers.end(),
                                 [&](std::size_t at) { return InSameWindow(kept[at], event); });
      if (opener != openers.end()) {
        kept[*opener].count += event.count;
        continue;
      }
    }
    if (ras::OpensWindow(event)) openers.push_back(kept.size());
    kept.push_back(std::move(event));
  }
  const std::size_t folded = events.size() - kept.size();
  events = std::move(kept);
  return folded;
}

std::int64_t WindowsLastMinute(const ras::RasEvent& event) {
  return ras::MinuteOf(*event.context.window_start + event.context.window);
}

}  // namespace

void RasPipeline::Handle(std::vector<ras::RasEvent> events, std::vector<ras::SourceCursor> cursors,
                         std::vector<ras::LinkReport> links) {
  if (events.empty() && cursors.empty() && links.empty()) return;
  const auto arrived = loop_.Now();
  // A kernel record about a PCI device rasd runs (an Xid, an AER error on a
  // GPU) is about that runtime device.
  AttributeToDevices(events);
  if (annotate_)
    for (auto& event : events) annotate_(event);
  // A NIC's fatal health is a link fault of the accelerators behind it.
  if (fabric_health_)
    if (auto report = fabric_health_->Observe(events)) links.push_back(std::move(*report));
  // No source reports 2^40 errors at once; a larger count is garbled input,
  // and it would overflow the store's sums (rasctl summary failed for good).
  for (auto& event : events) event.count = std::min(event.count, kMaxEventCount);
  // Each among those before it on its device: echoes, superseded codes and
  // repeats are parts of a fault, not faults of their own.
  bool repeats = false;
  for (auto& event : events) {
    fault_rules_.Judge(event);
    repeats = repeats || (event.context.window_start && *event.context.window_start != event.time);
    // People reading `rasctl events` see why a FATAL line did nothing.
    using Kind = ras::FaultContext::Kind;
    if (event.context.kind == Kind::kEcho || event.context.kind == Kind::kSuperseded ||
        event.context.kind == Kind::kSettling)
      event.summary += " [" + event.context.why + "]";
  }
  stats_.events += events.size();
  if (repeats) stats_.coalesced += FoldRepeats(events);
  const std::size_t before = events.size();
  const bool storm = InStorm(before);
  events = ras::CoalesceStorm(std::move(events), storm ? 0 : options_.storm_threshold);
  stats_.coalesced += before - events.size();

  // Effects first: the rows follow in the batch below.
  std::vector<double> isolations;
  std::vector<bool> acted;                    // by event: has an action of its own (a row)
  const std::size_t decided = events.size();  // pages split off are appended
  for (std::size_t i = 0; i < decided; ++i) {
    const auto actions = policy_.Decide(events[i], loop_.Now());
    if (decided_) decided_(events[i], actions);
    const auto acts = [this](const ras::Action& action) { return actuator_.Acts(action); };
    const std::vector<std::size_t> owners = SplitActedPages(events, i, actions, acts);
    acted.resize(events.size(), false);
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const ras::Action& action = actions[k];
      const std::size_t owner = owners[k];
      // A disabled or withheld action's row joins its minute's (coalesced):
      // the event may still grow.
      if (acts(action)) acted[owner] = true;
      const ActionOutcome outcome = actuator_.Apply(action, events[owner], owner);
      if (!outcome.health_change || outcome.health_change->to != runtime::HealthState::kIsolated)
        continue;
      // A driver's report carries when the device failed; a kernel-log
      // record when it was logged, which may be long ago: from arrival.
      const double seconds =
          events[owner].time_is == ras::RasEvent::TimeIs::kFailure
              ? std::chrono::duration<double>(loop_.GetClock().Wall() - events[owner].time).count()
              : std::chrono::duration<double>(loop_.Now() - arrived).count();
      isolations.push_back(std::max(0.0, seconds));
    }
  }
  // The links after the events they came with (a driver's link-down report
  // is stored as an event of this batch).
  if (link_decider_)
    for (const auto& report : links) link_decider_->Decide(report);

  ras::StoreBatch batch;
  batch.events = std::move(events);
  batch.cursors = std::move(cursors);
  Log(batch.events);
  HandledBatch handled{.events = batch.events, .isolation_seconds = std::move(isolations)};
  TakePending(batch);
  unsaved_pages_.Add(batch.events);
  const bool acts_now =
      std::any_of(acted.begin(), acted.end(), [](bool acted_here) { return acted_here; });
  if (!storm || acts_now) {
    TakePages(batch);
  } else if (!saving_pages_.empty() || loop_.Now() - pages_saved_at_ >= kPagesSavePeriod) {
    TakeSomePages(batch);
  } else {
    batch.page_errors.emplace();  // saved with a later batch
    if (!pages_timer_->Armed()) pages_timer_->ArmAfter(kPagesSavePeriod);
  }
  if (backlog_.empty()) {
    // Only under a storm, or for a fault rule's repeats (their window's
    // row): events of a quiet node keep a row each.
    if (storm || repeats) PlanGrowth(batch, acted);
    auto stored = store_.Commit(batch);
    if (stored) {
      health_.Committed();
      AfterCommit();
      OpenStored(batch, acted, stored->event_ids);
      handled.stored = true;
      handled.event_ids = std::move(stored->event_ids);
      for (const auto& observer : observers_) observer(handled);
      return;
    }
    NoteFailure(batch, stored.error());
    // Stored later as rows of their own: no row waits to grow meanwhile.
    batch.grows.clear();
    open_.clear();
  }
  // Behind what waits already, never past it (its cursor included); the
  // retry timer commits the backlog, not every batch that arrives meanwhile
  // (under a storm on a full disk that would rewrite it all each slice).
  for (const auto& observer : observers_) observer(handled);
  backlog_.push_back(std::move(batch));
  Bound();
  stats_.backlog_batches = backlog_.size();
  stats_.backlog_events = EventsIn(backlog_);
  ArmRetry();
}

bool RasPipeline::InStorm(std::size_t events) {
  // A storm is a batch over the threshold, or more events than that within
  // a second however the source cut them into batches (a reader that keeps
  // up with the kernel gets small ones); it lasts 10 s past the last sign.
  const auto now = loop_.Now();
  const auto second = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  if (second != rate_second_) {
    rate_second_ = second;
    events_this_second_ = 0;
  }
  events_this_second_ += events;
  if (events > options_.storm_threshold || events_this_second_ > options_.storm_threshold)
    storm_until_ = now + std::chrono::seconds(10);
  return now < storm_until_;
}

namespace {

// The pages an event names, with their errors.
std::vector<ras::PageErrors> PagesOf(const ras::RasEvent& event) {
  if (!event.pages.empty()) return event.pages;
  if (!event.address) return {};
  return {{ras::PageOf(event.address->value), event.count}};
}

}  // namespace

void RasPipeline::OpenEvent::AddPages(const std::vector<ras::PageErrors>& more) {
  for (const auto& page : more) {
    auto [at, added] = page_index.try_emplace(page.page, pages.size());
    if (added) pages.push_back({page.page, 0});
    pages[at->second].errors += page.errors;
  }
}

void RasPipeline::PlanGrowth(ras::StoreBatch& batch, const std::vector<bool>& acted) {
  if (open_.empty()) return;
  batch.grows.assign(batch.events.size(), std::nullopt);
  for (std::size_t i = 0; i < batch.events.size(); ++i) {
    const ras::RasEvent& event = batch.events[i];
    if (i < acted.size() && acted[i]) continue;
    const std::int64_t minute = ras::MinuteOf(event);
    auto open = std::find_if(open_.begin(), open_.end(), [&](const OpenEvent& row) {
      return event.context.window_start
                 ? InSameWindow(row.first, event)
                 : row.minute == minute && ras::SameComponent(row.first, event);
    });
    if (open == open_.end()) continue;
    const std::vector<ras::PageErrors> pages = PagesOf(event);
    std::size_t new_pages = 0;
    for (const auto& page : pages) new_pages += open->page_index.count(page.page) == 0 ? 1 : 0;
    if (open->pages.size() + new_pages > kMaxOpenPages) {
      open_.erase(open);  // this event starts the component's next row
      continue;
    }
    open->AddPages(pages);
    open->count += event.count;
    open->last = std::max(open->last, event.time);
    ras::EventGrowth growth{.id = open->id, .count = open->count, .last = open->last};
    if (open->pages.size() > 1) {  // one page: the row's address says it
      const std::size_t listed = std::min(open->pages.size(), ras::kMaxStoredPages);
      growth.pages.assign(open->pages.begin(),
                          open->pages.begin() + static_cast<std::ptrdiff_t>(listed));
      growth.pages_not_listed = open->pages.size() - listed;
    }
    batch.grows[i] = std::move(growth);
  }
}

void RasPipeline::OpenStored(const ras::StoreBatch& batch, const std::vector<bool>& acted,
                             const std::vector<std::int64_t>& event_ids) {
  std::int64_t newest = 0;
  for (std::size_t i = 0; i < batch.events.size() && i < event_ids.size(); ++i) {
    const ras::RasEvent& event = batch.events[i];
    newest = std::max(newest, ras::MinuteOf(event));
    const bool grew = i < batch.grows.size() && batch.grows[i];
    if (grew && batch.grows[i]->id == event_ids[i]) continue;
    if (grew) {
      // Its row was gone (pruned): the event is a row of its own now.
      const std::int64_t gone = batch.grows[i]->id;
      std::erase_if(open_, [gone](const OpenEvent& row) { return row.id == gone; });
    }
    // The first event of a fault rule's storm window takes its repeats,
    // whatever it did itself.
    const bool opens_window = ras::OpensWindow(event);
    if (i < acted.size() && acted[i] && !opens_window) continue;
    OpenEvent row{.id = event_ids[i],
                  .minute = opens_window ? WindowsLastMinute(event) : ras::MinuteOf(event),
                  .first = event,
                  .count = event.count,
                  .last = event.time};
    row.first.pages.clear();  // the identity only
    row.first.raw.clear();
    row.first.summary.clear();
    row.AddPages(PagesOf(event));
    open_.push_back(std::move(row));
  }
  // Rows of minutes that have passed take nothing more; the newest rows
  // are kept within the bound.
  std::erase_if(open_, [newest](const OpenEvent& row) { return row.minute + 1 < newest; });
  if (open_.size() > kMaxOpenEvents)
    open_.erase(open_.begin(),
                open_.begin() + static_cast<std::ptrdiff_t>(open_.size() - kMaxOpenEvents));
}

void RasPipeline::Log(const std::vector<ras::RasEvent>& events) {
  const std::int64_t second = std::chrono::duration_cast<std::chrono::seconds>(loop_.Now()).count();
  if (second != log_window_second_) {
    if (unlogged_ > 0)
      RASD_LOG_WARN("{} more RAS event(s) in the last second were stored but not logged", unlogged_);
    log_window_second_ = second;
    logged_in_window_ = 0;
    unlogged_ = 0;
  }
  auto logger = common::GetLogger("ras");
  for (const auto& event : events) {
    if (logged_in_window_ >= kMaxLoggedPerSecond) {
      ++unlogged_;
      continue;
    }
    ++logged_in_window_;
    const auto level = event.severity >= ras::Severity::kUcna ? spdlog::level::warn
                       : event.severity == ras::Severity::kCe ? spdlog::level::info
                                                              : spdlog::level::debug;
    RASD_LOGGER_LOG(logger, level, "RAS event: {}", Describe(event));
  }
}

nlohmann::json RasPipeline::Stats::ToJson() const {
  return {{"events_ingested", events},
          {"store_failures", store_failures},
          {"store_ok", store_ok},
          {"store_backlog_events", backlog_events},
          {"store_dropped_events", dropped_events},
          {"coalesced", coalesced},
          {"pruned", pruned}};
}

}  // namespace rasd::daemon
