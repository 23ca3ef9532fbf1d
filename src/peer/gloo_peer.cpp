// build/atoll-gloo-peer: the peer users already have. PyTorch's own collectives, from LibTorch's
// c10d ProcessGroupGloo (TCP), on the same gradients as `atoll bench sync`:
//   gloo_dense  — densify, then ProcessGroupGloo::allreduce on the M-float tensor;
//   gloo_sparse — ProcessGroupGloo::allreduce on a torch sparse COO tensor (what
//                 torch.distributed.all_reduce does for sparse gradients with the Gloo backend).
// One process per rank, rendezvous through a c10d FileStore; scripts/testbed-gloo starts one per
// testbed host. Output: bench sync's JSON lines (rank 0), with time_s the median over repeats of
// the slowest rank, and `verified` when gloo_sparse equals gloo_dense and both equal the dense sum
// computed here from every rank's regenerated gradient.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")

#include "atoll/sparse/characteristics.h"
#include "atoll/sparse/generator.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"atoll-gloo-peer: PyTorch ProcessGroupGloo dense and sparse allreduce"};
  int rank = -1, world = 0, repeat = 5;
  std::string store_path, iface = "eth0";
  atl::sparse::GeneratorOptions gen{std::uint64_t{1} << 22, 0.01, 1.1, 1,
                                    atl::sparse::ValueKind::normal};
  app.add_option("--rank", rank, "this process's rank")->required();
  app.add_option("--world", world, "number of ranks")->required();
  app.add_option("--store", store_path, "c10d FileStore path shared by all ranks")->required();
  app.add_option("--iface", iface, "network interface for Gloo's TCP transport");
  app.add_option("--elements", gen.elements, "element count M");
  app.add_option("--density", gen.density, "share of non-zeros per worker");
  app.add_option("--zipf", gen.zipf_exponent, "Zipf exponent of index popularity");
  app.add_option("--seed", gen.seed, "generator seed (as bench sync)");
  app.add_option("--repeat", repeat, "timed repetitions (median reported)");
  try {
    app.parse(argc, argv);
    if (world < 1 || rank < 0 || rank >= world) {
      throw CLI::ValidationError("--rank/--world", "need 0 <= rank < world");
    }
    if (repeat < 1) throw CLI::ValidationError("--repeat", "must be >= 1");
    atl::sparse::validate(gen);
  } catch (const CLI::ParseError& e) {
    return (app.exit)(e);
  } catch (const std::exception& e) {
    std::cerr << "atoll-gloo-peer: error: rank " << rank << ": " << e.what() << "\n";
    return 2;
  }
  try {
    torch::set_num_threads(1);
    auto store = c10::make_intrusive<::c10d::FileStore>(store_path, world);
    auto options = ::c10d::ProcessGroupGloo::Options::create();
    options->devices.push_back(::c10d::ProcessGroupGloo::createDeviceForInterface(iface));
    options->timeout = std::chrono::seconds(120);
    auto pg = c10::make_intrusive<::c10d::ProcessGroupGloo>(store, rank, world, options);

    // Every rank regenerates every rank's gradient: the reference sum and the characteristics.
    std::vector<atl::sparse::SparseGradient<std::uint64_t>> all;
    for (int r = 0; r < world; ++r)
      all.push_back(atl::sparse::generate_gradient<std::uint64_t>(gen, r));
    const auto& mine = all[rank];
    const auto ch = atl::sparse::characterize<std::uint64_t>(all);
    std::vector<double> reference(gen.elements, 0.0), magnitude(gen.elements, 0.0);
    for (const auto& g : all)
      for (std::size_t k = 0; k < g.nnz(); ++k) {
        reference[g.indices[k]] += g.values[k];
        magnitude[g.indices[k]] += std::fabs(g.values[k]);
      }
    auto slowest = [&](double seconds) {
      std::vector<at::Tensor> t{torch::tensor({seconds}, torch::kFloat64)};
      pg->allreduce(t, ::c10d::AllreduceOptions{::c10d::ReduceOp::MAX})->wait();
      return t[0].item<double>();
    };
    auto check = [&](const at::Tensor& dense) {
      const float* p = dense.data_ptr<float>();
      for (std::uint64_t i = 0; i < gen.elements; ++i) {
        if (std::fabs(p[i] - reference[i]) > 4.0 * world * 1.2e-7 * magnitude[i]) return false;
      }
      return true;
    };
    const auto nnz = static_cast<std::int64_t>(mine.nnz());
    const auto M = static_cast<std::int64_t>(gen.elements);
    for (const std::string scheme : {"gloo_dense", "gloo_sparse"}) {
      std::vector<double> times;
      at::Tensor result;
      for (int rep = 0; rep < repeat + 1; ++rep) {  // the first call warms up connections
        pg->barrier()->wait();
        const auto t0 = Clock::now();
        if (scheme == "gloo_dense") {
          auto dense = torch::zeros({M}, torch::kFloat32);
          float* d = dense.data_ptr<float>();
          for (std::int64_t k = 0; k < nnz; ++k) d[mine.indices[k]] = mine.values[k];
          std::vector<at::Tensor> t{dense};
          pg->allreduce(t)->wait();
          result = t[0];
        } else {
          auto idx = torch::empty({1, nnz}, torch::kInt64);
          auto val = torch::empty({nnz}, torch::kFloat32);
          std::copy(mine.indices.begin(), mine.indices.end(), idx.data_ptr<std::int64_t>());
          std::copy(mine.values.begin(), mine.values.end(), val.data_ptr<float>());
          std::vector<at::Tensor> t{torch::sparse_coo_tensor(idx, val, {M}).coalesce()};
          pg->allreduce(t)->wait();
          result = t[0];
        }
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        const double worst = slowest(dt);
        if (rep > 0) times.push_back(worst);
      }
      const at::Tensor dense = result.is_sparse() ? result.to_dense() : result;
      const bool ok_here = check(dense.contiguous());
      const bool verified = slowest(ok_here ? 0.0 : 1.0) == 0.0;
      if (rank == 0) {
        nlohmann::json row{{"scheme", scheme},
                           {"ranks", world},
                           {"elements", gen.elements},
                           {"index_bits", 64},
                           {"density", ch.density},
                           {"densification", ch.densification},
                           {"skew", ch.skew},
                           {"zipf", gen.zipf_exponent},
                           {"source", "synthetic"},
                           {"repeat", repeat},
                           {"time_s", median(times)},
                           {"time_min_s", *std::min_element(times.begin(), times.end())},
                           {"verified", verified}};
        std::cout << row.dump() << std::endl;
      }
      if (!verified) {
        std::cerr << "atoll-gloo-peer: error: rank " << rank << ": " << scheme
                  << " does not match the dense reference\n";
        return 3;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "atoll-gloo-peer: error: rank " << rank << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
