// COO entries received by the sparse parameter server and by AGsparse, checked and then written
// where the schemes write them: flags bits 1-2 choose sparse_ps push (check, then the server's
// aggregation over its range), sparse_ps pull (check, then the result as a gradient) or agsparse
// (check, then the dense sum). Input: fuzz_input.h, counts in entries, payload = entries.
#include "../src/sync/received_entries.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const std::uint64_t M = in.elements;
  const std::uint32_t n = in.ranks, rank = in.rank;
  auto entries = atl::fuzz::items_of<atl::sparse::Entry<Index>>(in.payload);
  try {
    switch ((in.flags >> 1) % 3) {
      case 0: {
        sparse_ps_check_push<Index>(M, n, rank, entries, in.counts);
        std::vector<Index> idx;
        std::vector<float> val;
        sum_own_range<Index>(entries, M, n, rank, idx, val);
        break;
      }
      case 1: {
        sparse_ps_check_pull<Index>(M, entries, in.counts);
        atl::sparse::SparseGradient<Index> g;
        g.elements = M;
        for (const auto& e : entries) {  // packed entries: copy the fields, bind no reference
          const Index x = e.index;
          const float v = e.value;
          g.indices.push_back(x);
          g.values.push_back(v);
        }
        g.validate();  // the check above promises a valid gradient
        break;
      }
      default: {
        agsparse_check_entries<Index>(M, entries, in.counts);
        std::vector<float> dense(M, 0.0f);
        for (const auto& e : entries) dense[e.index] += e.value;
      }
    }
  } catch (const MalformedMessage&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
