// Zen over rows (include/atoll/sync/zen_rows.h), row width w = 1 + extra % 8, R = M rows.
// flags bit 1 clear: a server's received push (counts: bytes from each sender) checked and summed,
// then its pull block encoded (coding: (flags >> 2) % kPullCodings). Set: the pull blocks of every
// server (counts: the rows each announced; the blocks' sizes follow from them and the coding, the
// same for every server) decoded, over all the server's strata or, with flags bit 4, the chunk from
// stratum (extra / 8) % (slots + 1) to the end. Input: fuzz_input.h.
#include "atoll/sync/zen_rows.h"

#include <vector>

#include "atoll/sync/scheme.h"
#include "fuzz_input.h"

namespace {

template <class Index>
void push(const atl::fuzz::SyncInput& in, const atl::sync::RowLayout& layout, std::uint32_t w,
          atl::sync::PullCoding coding) {
  using namespace atl::sync;
  std::size_t total = 0;
  for (const auto c : in.counts) total += c;
  if (total > in.payload.size()) return;  // the transport delivers exactly the counts' bytes
  ZenRowSums sums;
  try {
    zen_row_aggregate<Index>(layout, in.rank, w, in.payload.first(total), in.counts, sums);
  } catch (const MalformedMessage&) {
    return;
  }
  std::vector<std::uint8_t> block;
  zen_row_encode<Index>(layout, in.rank, sums, coding, block);
}

template <class Index>
void pull(const atl::fuzz::SyncInput& in, const atl::sync::RowLayout& layout, std::uint32_t w,
          atl::sync::PullCoding coding) {
  using namespace atl::sync;
  const std::size_t slots = layout.slots();
  const std::size_t s0 = (in.flags & 16) ? (in.extra / 8) % (slots + 1) : 0;
  std::vector<std::uint64_t> rows(in.counts.begin(), in.counts.end());
  std::vector<std::size_t> sizes;
  std::size_t total_bytes = 0;
  std::uint64_t total_rows = 0;
  for (const auto r : rows) {
    if (r > layout.rows()) return;  // the announcement is checked before any block is sized
    sizes.push_back(zen_row_block_bytes(slots - s0, r, w, sizeof(Index), coding));
    total_bytes += sizes.back();
    total_rows += r;
  }
  if (total_rows > layout.rows() || total_bytes > in.payload.size()) return;
  const std::vector<PullCoding> codings(rows.size(), coding);
  std::vector<Index> idx(total_rows);
  std::vector<float> val(total_rows * w);
  try {
    zen_row_decode_chunk<Index>(layout, w, s0, slots, in.payload.first(total_bytes), sizes, rows,
                                codings, idx.data(), val.data(), total_rows);
  } catch (const MalformedMessage&) {
  }
}

template <class Index>
void run(const atl::fuzz::SyncInput& in) {
  using namespace atl::sync;
  const RowLayout layout(in.elements, in.ranks, in.seed);
  const std::uint32_t w = 1 + in.extra % 8;
  const auto coding = static_cast<PullCoding>((in.flags >> 2) % kPullCodings);
  if (in.flags & 2)
    pull<Index>(in, layout, w, coding);
  else
    push<Index>(in, layout, w, coding);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return atl::fuzz::run_sync_target(data, size,
                                    [](auto index, const auto& in) { run<decltype(index)>(in); });
}
