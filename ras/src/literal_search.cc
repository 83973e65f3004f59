#include "literal_search.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifdef RASD_HAVE_VECTORSCAN
#include <hs.h>
#endif

namespace rasd::ras {

#ifdef RASD_HAVE_VECTORSCAN

namespace {

using Words = std::vector<std::pair<std::string_view, std::uint32_t>>;

// FNV-1a over each word's length, bytes and group: serialized bytes are
// loaded only for the words they were compiled from, in the same order.
std::uint64_t Fingerprint(const Words& words) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  auto mix = [&hash](const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ULL;
    }
  };
  for (const auto& [word, group] : words) {
    const std::uint64_t size = word.size();
    mix(&size, sizeof(size));
    mix(word.data(), word.size());
    mix(&group, sizeof(group));
  }
  return hash;
}

}  // namespace

struct LiteralSearch::Database {
  hs_database_t* database = nullptr;
  std::vector<std::uint32_t> groups;  // by word id
  std::uint64_t fingerprint = 0;
  ~Database() { hs_free_database(database); }
};

class LiteralSearch::Scratch {
 public:
  hs_scratch_t* scratch = nullptr;
  ~Scratch() { hs_free_scratch(scratch); }
};

LiteralSearch::LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words)
    : database_(std::make_unique<Database>()) {
  Compile(words);
}

void LiteralSearch::Compile(const std::vector<std::pair<std::string_view, std::uint32_t>>& words) {
  origin_ = Origin::kCompiled;
  database_->fingerprint = Fingerprint(words);
  std::vector<std::string> owned;
  std::vector<const char*> expressions;
  std::vector<std::size_t> lengths;
  std::vector<unsigned> flags;
  std::vector<unsigned> ids;
  owned.reserve(words.size());
  for (const auto& [word, group] : words) {
    owned.emplace_back(word);
    ids.push_back(static_cast<unsigned>(database_->groups.size()));
    database_->groups.push_back(group);
    flags.push_back(0);  // case-sensitive, every match reported
  }
  for (const auto& word : owned) {
    expressions.push_back(word.c_str());
    lengths.push_back(word.size());
  }
  hs_compile_error_t* error = nullptr;
  if (hs_compile_lit_multi(expressions.data(), flags.data(), ids.data(), lengths.data(),
                           static_cast<unsigned>(expressions.size()), HS_MODE_BLOCK, nullptr,
                           &database_->database, &error) != HS_SUCCESS) {
    std::fprintf(stderr, "rasd: vectorscan cannot compile the scanner's words: %s\n",
                 error != nullptr ? error->message : "?");
    std::abort();
  }
}

LiteralSearch::LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words,
                             std::string_view serialized)
    : database_(std::make_unique<Database>()) {
  const std::uint64_t fingerprint = Fingerprint(words);
  std::uint64_t stored = 0;
  hs_database_t* loaded = nullptr;
  hs_scratch_t* probe = nullptr;
  bool usable = serialized.size() > sizeof(stored);
  if (usable) {
    std::memcpy(&stored, serialized.data(), sizeof(stored));
    serialized.remove_prefix(sizeof(stored));
    // Version and platform are checked here: a database built for
    // instructions this CPU lacks is refused by the scratch allocation.
    usable = stored == fingerprint &&
             hs_deserialize_database(serialized.data(), serialized.size(), &loaded) == HS_SUCCESS &&
             hs_alloc_scratch(loaded, &probe) == HS_SUCCESS;
  }
  hs_free_scratch(probe);
  if (!usable) {
    hs_free_database(loaded);
    Compile(words);
    return;
  }
  origin_ = Origin::kLoaded;
  database_->database = loaded;
  database_->fingerprint = fingerprint;
  for (const auto& word : words) database_->groups.push_back(word.second);
}

std::string LiteralSearch::Serialize() const {
  char* bytes = nullptr;
  std::size_t size = 0;
  if (hs_serialize_database(database_->database, &bytes, &size) != HS_SUCCESS) return {};
  std::string out(sizeof(database_->fingerprint) + size, '\0');
  std::memcpy(out.data(), &database_->fingerprint, sizeof(database_->fingerprint));
  std::memcpy(out.data() + sizeof(database_->fingerprint), bytes, size);
  std::free(bytes);  // hs_serialize_database's allocator is malloc by default
  return out;
}

LiteralSearch::~LiteralSearch() = default;

void LiteralSearch::ScratchDeleter::operator()(Scratch* scratch) const { delete scratch; }

LiteralSearch::ScratchPtr LiteralSearch::NewScratch() const {
  ScratchPtr scratch(new Scratch);
  if (hs_alloc_scratch(database_->database, &scratch->scratch) != HS_SUCCESS) std::abort();
  return scratch;
}

namespace {

struct HitSink {
  const std::uint32_t* groups;
  std::vector<KeywordMatcher::Hit>* hits;
};

int OnMatch(unsigned id, unsigned long long /*from*/, unsigned long long to, unsigned /*flags*/,
            void* context) {
  auto* sink = static_cast<HitSink*>(context);
  sink->hits->push_back({static_cast<std::size_t>(to), sink->groups[id]});
  return 0;
}

}  // namespace

void LiteralSearch::FindAll(std::string_view text, Scratch& scratch, std::vector<Hit>& hits) const {
  hits.clear();
  if (text.empty()) return;
  HitSink sink{database_->groups.data(), &hits};
  hs_scan(database_->database, text.data(), static_cast<unsigned>(text.size()), 0, scratch.scratch,
          OnMatch, &sink);
  // Block mode reports literal matches by end offset; make sure of it, as
  // the scanner's walk depends on it.
  if (!std::is_sorted(hits.begin(), hits.end(),
                      [](const Hit& a, const Hit& b) { return a.end < b.end; })) {
    std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) { return a.end < b.end; });
  }
}

std::string_view LiteralSearch::Engine() { return "vectorscan"; }

#else  // !RASD_HAVE_VECTORSCAN

struct LiteralSearch::Database {};
class LiteralSearch::Scratch {};

LiteralSearch::LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words)
    : fallback_(std::make_unique<KeywordMatcher>(words)) {}

LiteralSearch::LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words,
                             std::string_view /*serialized*/)
    : LiteralSearch(words) {}

std::string LiteralSearch::Serialize() const { return {}; }

LiteralSearch::~LiteralSearch() = default;

void LiteralSearch::ScratchDeleter::operator()(Scratch* scratch) const { delete scratch; }

LiteralSearch::ScratchPtr LiteralSearch::NewScratch() const { return ScratchPtr(new Scratch); }

void LiteralSearch::FindAll(std::string_view text, Scratch& /*scratch*/,
                            std::vector<Hit>& hits) const {
  fallback_->FindAll(text, hits);
}

std::string_view LiteralSearch::Engine() { return "keyword-matcher"; }

#endif

}  // namespace rasd::ras
