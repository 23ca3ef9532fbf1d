#include "sparcml_message.h"

#include <fmt/format.h>

#include "common.h"

namespace atl::sync {
namespace {

constexpr std::uint8_t kSparse = 0, kDense = 1;

template <class Index>
void to_dense(SparcmlAccumulator<Index>& a, std::uint64_t elements) {
  if (a.dense) return;
  std::vector<float> d(elements, 0.0f);
  for (std::size_t k = 0; k < a.idx.size(); ++k) d[a.idx[k]] = a.val[k];
  a.val.swap(d);
  a.idx.clear();
  a.dense = true;
}

}  // namespace

template <class Index>
std::uint64_t sparcml_checked_size(std::uint64_t size, std::uint64_t elements, int sender) {
  if (size > sparcml_max_message_bytes<Index>(elements)) {
    throw MalformedMessage(
        fmt::format("sparcml: rank {} announced a {}-byte message; at most {} fit M = {}", sender,
                    size, sparcml_max_message_bytes<Index>(elements), elements));
  }
  return size;
}

template <class Index>
std::vector<std::uint8_t> sparcml_encode(const SparcmlAccumulator<Index>& a) {
  ByteWriter w;
  w.write(a.dense ? kDense : kSparse);
  w.write<std::uint64_t>(a.val.size());
  if (!a.dense) w.append(a.idx.data(), a.idx.size() * sizeof(Index));
  w.append(a.val.data(), a.val.size() * sizeof(float));
  return std::move(w.bytes);
}

template <class Index>
SparcmlAccumulator<Index> sparcml_decode(std::span<const std::uint8_t> bytes,
                                         std::uint64_t elements, int sender) {
  auto malformed = [&](const std::string& what) {
    return MalformedMessage(fmt::format("sparcml: malformed message from rank {} ({} bytes): {}",
                                        sender, bytes.size(), what));
  };
  ByteReader r(bytes);
  if (r.remaining() < 9) throw malformed("shorter than its 9-byte header");
  SparcmlAccumulator<Index> a;
  const auto form = r.read<std::uint8_t>();
  if (form != kSparse && form != kDense) throw malformed(fmt::format("unknown form {}", form));
  a.dense = form == kDense;
  const auto count = r.read<std::uint64_t>();
  const std::size_t entry_bytes = (a.dense ? 0 : sizeof(Index)) + sizeof(float);
  if (a.dense ? count != elements : count > elements)
    throw malformed(fmt::format("{} values for M = {}", count, elements));
  if (count != r.remaining() / entry_bytes || r.remaining() % entry_bytes != 0) {
    throw malformed(fmt::format("{} bytes after the header for {} {} entries", r.remaining(), count,
                                a.dense ? "dense" : "sparse"));
  }
  if (!a.dense) {
    a.idx.resize(count);
    r.take(a.idx.data(), count * sizeof(Index));
    for (std::size_t k = 0; k < a.idx.size(); ++k) {
      if (a.idx[k] >= elements || (k > 0 && a.idx[k] <= a.idx[k - 1])) {
        throw malformed(fmt::format("index {} at entry {} is past M or not above the previous",
                                    static_cast<std::uint64_t>(a.idx[k]), k));
      }
    }
  }
  a.val.resize(count);
  r.take(a.val.data(), count * sizeof(float));
  return a;
}

template <class Index>
void sparcml_accumulate(SparcmlAccumulator<Index>& mine, SparcmlAccumulator<Index>&& other,
                        std::uint64_t elements, double dense_switch) {
  if (mine.dense || other.dense) {
    to_dense(mine, elements);
    if (other.dense) {
      for (std::size_t k = 0; k < elements; ++k) mine.val[k] += other.val[k];
    } else {
      for (std::size_t k = 0; k < other.idx.size(); ++k) mine.val[other.idx[k]] += other.val[k];
    }
    return;
  }
  std::vector<Index> idx;
  std::vector<float> val;
  sparse::merge_add<Index>(mine.idx, mine.val, other.idx, other.val, idx, val);
  mine.idx.swap(idx);
  mine.val.swap(val);
  if (static_cast<double>(mine.idx.size()) * (sizeof(Index) + 4) >
      dense_switch * 4.0 * static_cast<double>(elements)) {
    to_dense(mine, elements);
  }
}

#define ATOLL_SPARCML_INSTANTIATE(I)                                                               \
  template std::uint64_t sparcml_checked_size<I>(std::uint64_t, std::uint64_t, int);               \
  template std::vector<std::uint8_t> sparcml_encode(const SparcmlAccumulator<I>&);                 \
  template SparcmlAccumulator<I> sparcml_decode(std::span<const std::uint8_t>, std::uint64_t,      \
                                                int);                                              \
  template void sparcml_accumulate(SparcmlAccumulator<I>&, SparcmlAccumulator<I>&&, std::uint64_t, \
                                   double);
ATOLL_SPARCML_INSTANTIATE(std::uint32_t)
ATOLL_SPARCML_INSTANTIATE(std::uint64_t)
#undef ATOLL_SPARCML_INSTANTIATE

}  // namespace atl::sync
