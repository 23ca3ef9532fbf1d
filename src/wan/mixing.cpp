#include "atoll/wan/mixing.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <stdexcept>

namespace atl::wan {
namespace {

using Matrix = Eigen::MatrixXd;

Matrix deviation(const Partition& round, std::size_t sites) {
  const auto w = mixing_matrix(round, sites);
  Matrix m(sites, sites);
  for (std::size_t i = 0; i < sites; ++i)
    for (std::size_t j = 0; j < sites; ++j) m(i, j) = w[i * sites + j] - 1.0 / sites;
  return m;
}

double spectral_norm(const Matrix& m) {
  Eigen::JacobiSVD<Matrix> svd(m);
  return svd.singularValues()(0);
}

}  // namespace

void validate_partition(const Partition& round, std::size_t sites) {
  std::vector<int> seen(sites, 0);
  for (const auto& clique : round) {
    if (clique.empty()) throw std::invalid_argument("a round has an empty clique");
    for (auto s : clique) {
      if (s >= sites) {
        throw std::invalid_argument(fmt::format("site index {} out of range ({} sites)", s, sites));
      }
      if (seen[s]++)
        throw std::invalid_argument(fmt::format("site {} is in two cliques of a round", s));
    }
  }
}

std::vector<double> mixing_matrix(const Partition& round, std::size_t sites) {
  validate_partition(round, sites);
  std::vector<double> w(sites * sites, 0.0);
  for (std::size_t i = 0; i < sites; ++i) w[i * sites + i] = 1.0;  // idle sites keep their own
  for (const auto& clique : round) {
    const double share = 1.0 / static_cast<double>(clique.size());
    for (auto i : clique)
      for (auto j : clique) w[i * sites + j] = share;
  }
  return w;
}

double consensus_rate(const Schedule& schedule, std::size_t sites) {
  return consensus_error(schedule, sites, schedule.size());
}

double consensus_error(const Schedule& schedule, std::size_t sites, std::size_t rounds) {
  if (schedule.empty()) throw std::invalid_argument("a schedule needs at least one round");
  Matrix product = Matrix::Identity(sites, sites) - Matrix::Constant(sites, sites, 1.0 / sites);
  for (std::size_t t = 0; t < rounds; ++t)
    product = deviation(schedule[t % schedule.size()], sites) * product;
  return spectral_norm(product);
}

std::optional<std::size_t> rounds_to_consensus(const Schedule& schedule, std::size_t sites,
                                               double epsilon, std::size_t max_rounds) {
  if (!(epsilon > 0 && epsilon < 1)) {
    throw std::invalid_argument(fmt::format("epsilon must be in (0, 1) (got {})", epsilon));
  }
  if (schedule.empty()) throw std::invalid_argument("a schedule needs at least one round");
  std::vector<Matrix> rounds;
  for (const auto& r : schedule) rounds.push_back(deviation(r, sites));
  Matrix product = Matrix::Identity(sites, sites) - Matrix::Constant(sites, sites, 1.0 / sites);
  for (std::size_t t = 1; t <= max_rounds; ++t) {
    product = rounds[(t - 1) % rounds.size()] * product;
    if (spectral_norm(product) <= epsilon) return t;
  }
  return std::nullopt;
}

}  // namespace atl::wan
