// Elias–Fano coding of a strictly increasing sequence of k positions in a universe [0, u): a
// succinct index code within about 2 bits per position of the entropy bound log2 C(u, k)
// (Elias 1974, Fano 1971). Each position x is split into its L = floor(log2(u / k)) low bits,
// stored packed, and its high part x >> L, stored in unary as bit (x >> L) + i of a bit vector of
// k + (u >> L) + 1 bits. Issue 18's third index format beside the hash bitmap (u / 8 bytes) and
// COO (4 or 8 bytes per index): Zen's pull carries it when it is the smallest of the three
// (scheme zen_ef, src/sync/zen_pull_layout.cpp); docs/results/index-coding.md measures what it saves.
//
// Why not libsdsl's sd_vector (Debian's libsdsl-dev): its serialized form carries its own headers,
// and its loader trusts the sizes it reads, so a corrupt block from a peer could make it allocate
// any amount; this decoder checks every field against the caller's (u, k) and the buffer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace atl::sparse {

// The low bits per position for k positions in [0, u).
unsigned elias_fano_low_bits(std::uint64_t universe, std::uint64_t count);
// The encoded size in bytes of k positions in [0, u) (a function of u and k alone, so a receiver
// knows a block's size from its count). 0 for k = 0.
std::uint64_t elias_fano_bytes(std::uint64_t universe, std::uint64_t count);
// Appends the code of `positions` (strictly increasing, each < universe) to `out`.
// std::invalid_argument otherwise.
void elias_fano_encode(std::span<const std::uint64_t> positions, std::uint64_t universe,
                       std::vector<std::uint8_t>& out);
// Decodes `count` positions from exactly elias_fano_bytes(universe, count) bytes into `out`
// (replaced). std::runtime_error naming what is wrong for a buffer of another size, a high part
// with other than `count` ones or bits past its last one, or a position >= universe.
void elias_fano_decode(std::span<const std::uint8_t> code, std::uint64_t universe,
                       std::uint64_t count, std::vector<std::uint64_t>& out);
// The same validation, the positions set as bits of `words` (ceil(universe / 64) words, cleared
// first): the form Zen's pull decoder walks.
void elias_fano_decode_bitmap(std::span<const std::uint8_t> code, std::uint64_t universe,
                              std::uint64_t count, std::span<std::uint64_t> words);
// The bitmap forms Zen's pull blocks carry (src/sync/zen_encode.cpp, zen_rows.cpp): `words`
// holds one bit per position of [0, universe) (ceil(universe / 64) words; bits past the universe
// are ignored). Appends the code of its set positions, or with `complement` of its clear ones
// (a nearly full block lists its few empty slots).
void elias_fano_encode_words(std::span<const std::uint64_t> words, std::uint64_t universe,
                             bool complement, std::vector<std::uint8_t>& out);
// The inverse: `set` is the number of set positions the bitmap has (the code lists universe - set
// positions with `complement`); `words` receives the bitmap, with no bit past the universe.
// Validates as elias_fano_decode_bitmap does.
void elias_fano_decode_words(std::span<const std::uint8_t> code, std::uint64_t universe,
                             std::uint64_t set, bool complement, std::span<std::uint64_t> words);
// log2 C(universe, count) in bits: the fewest bits any code needs to tell apart every set of
// `count` positions in [0, universe).
double subset_entropy_bits(std::uint64_t universe, std::uint64_t count);

}  // namespace atl::sparse
