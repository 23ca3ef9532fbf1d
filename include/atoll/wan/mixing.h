// Information mixing of a synchronization schedule (wan.md, "Information sharing").
//
// A round is a partition of the sites into cliques; the sites of a clique average their models,
// so the round's mixing matrix is W[i][j] = 1/|C| for i, j in the same clique C (an idle site
// keeps its own: W[i][i] = 1). A periodic schedule repeats its rounds. With J = 11ᵀ/N, the
// consensus error after rounds 1..t is ||W_t ⋯ W_1 − J||₂; the consensus rate of a period is
// ρ = ||Φ − J||₂ with Φ = W_T ⋯ W_1 (every W is symmetric and doubly stochastic, so
// W_t ⋯ W_1 − J = (W_t − J) ⋯ (W_1 − J)).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace atl::wan {

using Clique = std::vector<std::size_t>;  // site indices
using Partition = std::vector<Clique>;    // one round; sites not listed are idle
using Schedule = std::vector<Partition>;  // one period, repeated

// std::invalid_argument naming the problem: a site listed twice, an index >= sites, an empty
// clique.
void validate_partition(const Partition& round, std::size_t sites);

// Row-major sites × sites.
std::vector<double> mixing_matrix(const Partition& round, std::size_t sites);

// ρ of one period (0 = exact consensus after one period, 1 = some sites never mix).
double consensus_rate(const Schedule& schedule, std::size_t sites);

// Consensus error ||W_t ⋯ W_1 − J||₂ after t rounds of the periodic schedule.
double consensus_error(const Schedule& schedule, std::size_t sites, std::size_t rounds);

// Smallest t with consensus error <= epsilon, following the schedule from its first round;
// nullopt if not reached within max_rounds. std::invalid_argument unless 0 < epsilon < 1.
std::optional<std::size_t> rounds_to_consensus(const Schedule& schedule, std::size_t sites,
                                               double epsilon, std::size_t max_rounds = 100000);

}  // namespace atl::wan
