// Zen's pull blocks viewed in place: zen_views.h.
#include "zen_views.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "atoll/sparse/elias_fano.h"
#include "zen_blocks.h"

namespace atl::sync::zen_views {
using namespace zen_blocks;

MalformedMessage malformed(std::uint32_t j, const std::string& what) {
  return MalformedMessage(fmt::format("zen: malformed pull block from server {}: {}", j, what));
}

ChunkViews parse_views(const HashLayout& layout, std::uint64_t granule_begin,
                       std::uint64_t granule_end, std::span<const std::uint8_t> blocks,
                       std::span<const std::size_t> counts, std::size_t index_bytes,
                       std::span<const std::uint32_t> order) {
  const auto n = static_cast<std::uint32_t>(counts.size());
  ChunkViews c;
  c.views.resize(n);
  c.ef_words.resize(n);
  std::size_t at = 0;
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::uint32_t j = order.empty() ? k : order[k];  // the server of the k-th block
    if (counts[j] < kBlockHeader || counts[j] > blocks.size() - at) throw malformed(j, "too short");
    View v{};
    v.format = blocks[at];
    std::memcpy(&v.nnz, blocks.data() + at + 1, 8);
    const std::size_t slots =
        (layout.granules_before(j, granule_end) - layout.granules_before(j, granule_begin)) *
        kZenGranule;
    if (v.format > kEliasFanoComplement || v.nnz > slots)
      throw malformed(j, fmt::format("format {} with {} non-zeros", v.format, v.nnz));
    const std::size_t key_bytes = format_key_bytes(v.format, slots, v.nnz, index_bytes);
    if (counts[j] != kBlockHeader + key_bytes + v.nnz * sizeof(float)) {
      throw malformed(
          j, fmt::format("{} bytes for format {} and {} non-zeros", counts[j], v.format, v.nnz));
    }
    v.keys = blocks.data() + at + kBlockHeader;
    v.values = v.keys + key_bytes;
    if (v.format == kEliasFano || v.format == kEliasFanoComplement) {
      c.ef_words[j].resize(slots / kZenGranule);
      try {  // kEliasFanoComplement: the code lists the empty slots
        sparse::elias_fano_decode_words(std::span<const std::uint8_t>(v.keys, key_bytes), slots,
                                        v.nnz, v.format == kEliasFanoComplement, c.ef_words[j]);
      } catch (const std::runtime_error& e) {
        throw malformed(j, e.what());
      }
      v.format = kBitmap;
      v.keys = reinterpret_cast<const std::uint8_t*>(c.ef_words[j].data());
    }
    c.views[j] = v;
    c.total += v.nnz;
    at += counts[j];
  }
  return c;
}

}  // namespace atl::sync::zen_views
