// Zen's building blocks over rows (include/atoll/sync/zen_rows.h).
#include "atoll/sync/zen_rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "atoll/sparse/elias_fano.h"
#include "atoll/sync/scheme.h"
#include "zen_blocks.h"

namespace atl::sync {

using namespace zen_blocks;

namespace {

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::size_t row_bytes(std::uint32_t width, std::size_t index_bytes) {
  return index_bytes + std::size_t{width} * sizeof(float);
}

}  // namespace

template <class Index>
void zen_row_partition(const SparseGradient<Index>& grad, const RowLayout& layout,
                       RowPartition<Index>& part) {
  const std::uint32_t n = layout.servers();
  const std::size_t w = grad.width;
  std::vector<std::size_t> rows(n, 0);
  std::vector<std::uint32_t>& owners = part.owners;
  owners.resize(grad.indices.size());
  for (std::size_t i = 0; i < grad.indices.size(); ++i)
    ++rows[owners[i] = layout.owner(grad.indices[i])];
  part.counts.assign(n, 0);
  std::vector<std::size_t> id_at(n), value_at(n);
  std::size_t offset = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    part.counts[j] = rows[j] * row_bytes(grad.width, sizeof(Index));
    id_at[j] = offset;
    value_at[j] = offset + rows[j] * sizeof(Index);
    offset += part.counts[j];
  }
  part.bytes.resize(offset);
  std::uint8_t* base = part.bytes.data();
  for (std::size_t i = 0; i < grad.indices.size(); ++i) {
    const Index r = grad.indices[i];
    const std::uint32_t j = owners[i];
    std::memcpy(base + id_at[j], &r, sizeof(Index));
    id_at[j] += sizeof(Index);
    std::memcpy(base + value_at[j], grad.values.data() + i * w, w * sizeof(float));
    value_at[j] += w * sizeof(float);
  }
}

template <class Index>
void zen_row_aggregate(const RowLayout& layout, std::uint32_t server, std::uint32_t width,
                       std::span<const std::uint8_t> received, std::span<const std::size_t> counts,
                       ZenRowSums& sums) {
  const std::size_t w = width, stride = row_bytes(width, sizeof(Index));
  const std::uint64_t R = layout.rows();
  const std::size_t slots = layout.slots();
  sums.width = width;
  sums.words.assign((slots + 63) / 64, 0);
  sums.pos.resize(slots);
  sums.values.clear();
  sums.rows = 0;
  std::size_t offset = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] % stride != 0) {
      throw MalformedMessage(
          fmt::format("zen: push from rank {} is {} bytes, not a whole number of rows of {} bytes",
                      j, counts[j], stride));
    }
    const std::size_t k = counts[j] / stride;
    const std::uint8_t* ids = received.data() + offset;
    const std::uint8_t* vals = ids + k * sizeof(Index);
    for (std::size_t i = 0; i < k; ++i) {
      const auto r = static_cast<std::uint64_t>(load<Index>(ids + i * sizeof(Index)));
      if (r >= R || layout.owner(r) != server ||
          (i > 0 && r <= load<Index>(ids + (i - 1) * sizeof(Index)))) {
        throw MalformedMessage(fmt::format(
            "zen: push from rank {} holds row {} at position {}, which is not an increasing row "
            "below {} owned by server {}",
            j, r, i, R, server));
      }
      const std::size_t s = layout.slot(r);
      std::uint64_t& word = sums.words[s / 64];
      const std::uint64_t bit = std::uint64_t{1} << (s % 64);
      if (!(word & bit)) {
        word |= bit;
        sums.pos[s] = static_cast<std::uint32_t>(sums.rows++);
        const std::size_t at = sums.values.size();
        sums.values.resize(at + w);
        std::memcpy(sums.values.data() + at, vals + i * w * sizeof(float), w * sizeof(float));
      } else {
        float* dst = sums.values.data() + std::size_t{sums.pos[s]} * w;
        const std::uint8_t* src = vals + i * w * sizeof(float);
        for (std::size_t c = 0; c < w; ++c) dst[c] += load<float>(src + c * sizeof(float));
      }
    }
    offset += counts[j];
  }
}

std::size_t zen_row_key_bits(const RowLayout& layout) { return (layout.slots() + 63) / 64 * 64; }

namespace {

// Header and key, padded with zero bytes to whole floats: the values start 4-byte aligned in the
// block, and (every block being whole floats) in a buffer of blocks laid end to end.
std::size_t values_offset(std::size_t key_bytes) {
  return (kBlockHeader + key_bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float);
}

}  // namespace

std::size_t zen_row_block_bytes(std::size_t strata, std::uint64_t rows, std::uint32_t width,
                                std::size_t index_bytes, PullCoding coding) {
  const std::size_t bits = (strata + 63) / 64 * 64;
  return values_offset(zen_pull_key_bytes(bits, rows, index_bytes, coding)) +
         rows * std::size_t{width} * sizeof(float);
}

namespace {

// Bits [s0, s1) of `words`, shifted to start at bit 0, in (s1 - s0 + 63) / 64 words (the last one's
// bits past s1 - s0 cleared).
void extract_bits(std::span<const std::uint64_t> words, std::size_t s0, std::size_t s1,
                  std::vector<std::uint64_t>& out) {
  const std::size_t bits = s1 - s0;
  out.assign((bits + 63) / 64, 0);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::size_t bit = s0 + 64 * k, wi = bit / 64, off = bit % 64;
    std::uint64_t v = words[wi] >> off;
    if (off && wi + 1 < words.size()) v |= words[wi + 1] << (64 - off);
    out[k] = v;
  }
  if (bits % 64 && !out.empty()) out.back() &= (std::uint64_t{1} << (bits % 64)) - 1;
}

}  // namespace

std::uint64_t ZenRowSums::rows_in(std::size_t s0, std::size_t s1) const {
  std::uint64_t count = 0;
  for (std::size_t s = s0; s < s1;) {
    const std::size_t wi = s / 64, off = s % 64, take = std::min<std::size_t>(64 - off, s1 - s);
    const std::uint64_t mask = take == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << take) - 1);
    count += static_cast<std::uint64_t>(std::popcount((words[wi] >> off) & mask));
    s += take;
  }
  return count;
}

template <class Index>
std::size_t zen_row_encode(const RowLayout& layout, std::uint32_t server, const ZenRowSums& sums,
                           PullCoding coding, std::size_t s0, std::size_t s1,
                           std::vector<std::uint8_t>& block) {
  const std::size_t bits = (s1 - s0 + 63) / 64 * 64, w = sums.width;
  std::vector<std::uint64_t> key;
  extract_bits(sums.words, s0, s1, key);
  std::uint64_t rows = 0;
  for (const auto word : key) rows += static_cast<std::uint64_t>(std::popcount(word));
  const std::uint8_t format = zen_pull_format(bits, rows, sizeof(Index), coding);
  const std::size_t start = block.size();
  block.push_back(format);
  block.resize(block.size() + 8);
  std::memcpy(block.data() + block.size() - 8, &rows, 8);
  auto for_each_slot = [&](auto&& f) {  // f(slot relative to s0)
    for (std::size_t k = 0; k < key.size(); ++k)
      for (std::uint64_t word = key[k]; word; word &= word - 1)
        f(k * 64 + static_cast<std::size_t>(std::countr_zero(word)));
  };
  if (format == kBitmap) {
    const std::size_t at = block.size();
    block.resize(at + bits / 8);
    std::memcpy(block.data() + at, key.data(), bits / 8);
  } else if (format == kCoo) {
    const std::size_t at = block.size();
    block.resize(at + rows * sizeof(Index));
    std::uint8_t* dst = block.data() + at;
    for_each_slot([&](std::size_t rel) {
      const auto r = static_cast<Index>(layout.row_of(server, s0 + rel));
      std::memcpy(dst, &r, sizeof(Index));
      dst += sizeof(Index);
    });
  } else {  // Elias-Fano of the rows' slots, or (kEliasFanoComplement) of the empty ones
    sparse::elias_fano_encode_words(key, bits, format == kEliasFanoComplement, block);
  }
  block.resize(start + values_offset(block.size() - start - kBlockHeader), 0);  // zero padding
  const std::size_t at = block.size();
  block.resize(at + rows * w * sizeof(float));
  std::uint8_t* dst = block.data() + at;
  for_each_slot([&](std::size_t rel) {
    std::memcpy(dst, sums.values.data() + std::size_t{sums.pos[s0 + rel]} * w, w * sizeof(float));
    dst += w * sizeof(float);
  });
  return block.size() - start;
}

template <class Index>
std::size_t zen_row_encode(const RowLayout& layout, std::uint32_t server, const ZenRowSums& sums,
                           PullCoding coding, std::vector<std::uint8_t>& block) {
  return zen_row_encode<Index>(layout, server, sums, coding, 0, layout.slots(), block);
}

namespace {

// One server's block as the walk reads it: its slots' bitmap over the chunk's strata (relative to
// the chunk's first) and its values.
struct DecodedKey {
  std::vector<std::uint64_t> words;
  const std::uint8_t* values = nullptr;
  std::uint64_t next = 0;
};

template <class Index>
void decode_key(const RowLayout& layout, std::uint32_t server, std::uint32_t width, std::size_t s0,
                std::size_t s1, std::span<const std::uint8_t> block, std::uint64_t rows,
                PullCoding coding, DecodedKey& key) {
  const std::size_t bits = (s1 - s0 + 63) / 64 * 64;
  auto fail = [&](const std::string& what) {
    throw MalformedMessage(fmt::format("zen: pull block from server {}: {}", server, what));
  };
  if (rows > s1 - s0) fail(fmt::format("{} rows announced for {} slots", rows, s1 - s0));
  const std::size_t expected = zen_row_block_bytes(s1 - s0, rows, width, sizeof(Index), coding);
  const std::uint8_t format = zen_pull_format(bits, rows, sizeof(Index), coding);
  if (block.size() != expected)
    fail(fmt::format("{} bytes, {} announced rows need {}", block.size(), rows, expected));
  if (block[0] != format) fail(fmt::format("format {}, expected {}", block[0], format));
  if (load<std::uint64_t>(block.data() + 1) != rows)
    fail(fmt::format("{} rows, {} announced", load<std::uint64_t>(block.data() + 1), rows));
  const std::uint8_t* k = block.data() + kBlockHeader;
  const std::size_t key_bytes = format_key_bytes(format, bits, rows, sizeof(Index));
  key.words.assign(bits / 64, 0);
  if (format == kBitmap) {
    std::memcpy(key.words.data(), k, bits / 8);
    std::uint64_t count = 0;
    for (const auto word : key.words) count += static_cast<std::uint64_t>(std::popcount(word));
    if (count != rows) fail(fmt::format("bitmap of {} rows, {} announced", count, rows));
  } else if (format == kCoo) {
    for (std::uint64_t i = 0; i < rows; ++i) {
      const auto r = static_cast<std::uint64_t>(load<Index>(k + i * sizeof(Index)));
      const std::size_t s = layout.slot(r);
      if (r >= layout.rows() || layout.owner(r) != server || s < s0 || s >= s1 ||
          (i > 0 && r <= load<Index>(k + (i - 1) * sizeof(Index))))
        fail(fmt::format("row {} at position {} is not an increasing row of this server and chunk",
                         r, i));
      key.words[(s - s0) / 64] |= std::uint64_t{1} << ((s - s0) % 64);
    }
  } else {
    try {  // kEliasFanoComplement: the code lists the empty slots
      sparse::elias_fano_decode_words(std::span<const std::uint8_t>(k, key_bytes), bits, rows,
                                      format == kEliasFanoComplement, key.words);
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
  }
  // Bits past the chunk's strata (the key is whole words) would be rows of the next chunk.
  if ((s1 - s0) % 64 && !key.words.empty() && (key.words.back() >> ((s1 - s0) % 64)) != 0)
    fail("a slot past the chunk is set");
  for (std::size_t at = kBlockHeader + key_bytes; at < values_offset(key_bytes); ++at)
    if (block[at] != 0) fail("padding after the key is not zero");
  key.values = block.data() + values_offset(key_bytes);
  key.next = 0;
}

}  // namespace

template <class Index>
std::size_t zen_row_decode_chunk(const RowLayout& layout, std::uint32_t width, std::size_t s0,
                                 std::size_t s1, std::span<const std::uint8_t> blocks,
                                 std::span<const std::size_t> counts,
                                 std::span<const std::uint64_t> rows,
                                 std::span<const PullCoding> codings, Index* oi, float* ov,
                                 std::size_t capacity, const float** views) {
  const std::uint32_t n = layout.servers();
  const std::uint64_t R = layout.rows();
  const std::size_t w = width;
  std::vector<DecodedKey> keys(n);
  std::uint64_t total = 0;
  std::size_t offset = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    if (offset + counts[j] > blocks.size())
      throw MalformedMessage(fmt::format("zen: pull block from server {} overruns", j));
    decode_key<Index>(layout, j, width, s0, s1, blocks.subspan(offset, counts[j]), rows[j],
                      codings[j], keys[j]);
    offset += counts[j];
    total += rows[j];
  }
  if (total > capacity)
    throw MalformedMessage(
        fmt::format("zen: servers announced {} rows, more than the {} expected", total, capacity));
  // Strata in order, and within a stratum its n rows in order (row s·n + i is server
  // (i + r_s) mod n's slot s): the rows come out sorted. 64 strata at a time are skipped where no
  // server holds any of them.
  std::size_t pos = 0;
  const std::size_t key_words = (s1 - s0 + 63) / 64;
  for (std::size_t k = 0; k < key_words; ++k) {
    std::uint64_t any = 0;
    for (const auto& key : keys) any |= key.words[k];
    for (; any; any &= any - 1) {
      const std::size_t b = static_cast<std::size_t>(std::countr_zero(any)), s = s0 + k * 64 + b;
      const std::uint64_t bit = std::uint64_t{1} << b;
      const std::uint32_t rot = layout.rotation(s);
      for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint32_t j = i + rot >= n ? i + rot - n : i + rot;
        DecodedKey& key = keys[j];
        if (!(key.words[k] & bit)) continue;
        const std::uint64_t r = static_cast<std::uint64_t>(s) * n + i;
        if (r >= R)
          throw MalformedMessage(
              fmt::format("zen: pull block from server {} sets row {} of {}", j, r, R));
        oi[pos] = static_cast<Index>(r);
        const std::uint8_t* values = key.values + key.next * w * sizeof(float);
        if (views) {  // float-aligned (values_offset); the caller's buffer holds floats
          views[pos] = reinterpret_cast<const float*>(values);
        } else {
          std::memcpy(ov + pos * w, values, w * sizeof(float));
        }
        ++key.next;
        ++pos;
      }
    }
  }
  return pos;
}

template <class Index>
void zen_row_decode(const RowLayout& layout, std::uint32_t width,
                    std::span<const std::uint8_t> blocks, std::span<const std::size_t> counts,
                    std::span<const std::uint64_t> rows, std::span<const PullCoding> codings,
                    SparseGradient<Index>& out) {
  std::uint64_t total = 0;
  for (const auto r : rows) total += r;
  if (total > layout.rows())
    throw MalformedMessage(
        fmt::format("zen: servers announced {} rows of {}", total, layout.rows()));
  out.elements = layout.rows() * width;
  out.width = width;
  out.indices.resize(total);
  out.values.resize(total * width);
  zen_row_decode_chunk<Index>(layout, width, 0, layout.slots(), blocks, counts, rows, codings,
                              out.indices.data(), out.values.data(), total);
}

#define ATL_ZEN_ROWS(Index)                                                                      \
  template void zen_row_partition(const SparseGradient<Index>&, const RowLayout&,                \
                                  RowPartition<Index>&);                                         \
  template void zen_row_aggregate<Index>(const RowLayout&, std::uint32_t, std::uint32_t,         \
                                         std::span<const std::uint8_t>,                          \
                                         std::span<const std::size_t>, ZenRowSums&);             \
  template std::size_t zen_row_encode<Index>(const RowLayout&, std::uint32_t, const ZenRowSums&, \
                                             PullCoding, std::vector<std::uint8_t>&);            \
  template std::size_t zen_row_encode<Index>(const RowLayout&, std::uint32_t, const ZenRowSums&, \
                                             PullCoding, std::size_t, std::size_t,               \
                                             std::vector<std::uint8_t>&);                        \
  template std::size_t zen_row_decode_chunk(                                                     \
      const RowLayout&, std::uint32_t, std::size_t, std::size_t, std::span<const std::uint8_t>,  \
      std::span<const std::size_t>, std::span<const std::uint64_t>, std::span<const PullCoding>, \
      Index*, float*, std::size_t, const float**);                                               \
  template void zen_row_decode(const RowLayout&, std::uint32_t, std::span<const std::uint8_t>,   \
                               std::span<const std::size_t>, std::span<const std::uint64_t>,     \
                               std::span<const PullCoding>, SparseGradient<Index>&);
ATL_ZEN_ROWS(std::uint32_t)
ATL_ZEN_ROWS(std::uint64_t)
#undef ATL_ZEN_ROWS

}  // namespace atl::sync
