#include "literal_search.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#ifdef RASD_HAVE_VECTORSCAN
#include <hs.h>
#endif

namespace rasd::ras {

#ifdef RASD_HAVE_VECTORSCAN

struct LiteralSearch::Database {
  hs_database_t* database = nullptr;
  std::vector<std::uint32_t> groups;  // by word id
  ~Database() { hs_free_database(database); }
};

class LiteralSearch::Scratch {
 public:
  hs_scratch_t* scratch = nullptr;
  ~Scratch() { hs_free_scratch(scratch); }
};

LiteralSearch::LiteralSearch(const std::vector<std::pair<std::string_view, std::uint32_t>>& words)
    : database_(std::make_unique<Database>()) {
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
