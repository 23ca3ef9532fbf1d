// atoll_torch._C: starts MPI for a Python process (MPI_THREAD_SERIALIZED: DDP calls collectives
// from autograd's thread while the main thread waits) and binds the "atoll" process group as a
// subclass of torch.distributed.ProcessGroup. atoll_torch/__init__.py loads libmpi with
// RTLD_GLOBAL first (Open MPI's plugins resolve their symbols against it) and registers the
// backend with torch.
#include <fmt/format.h>
#include <mpi.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "process_group.h"

namespace py = pybind11;
using atl::torch_backend::ProcessGroupAtoll;

namespace {

// MPI_COMM_WORLD's communicator, made once in init_mpi (Communicator::world() is collective over
// the world, and dist.new_group's creator runs on the group's members only).
std::optional<atl::comm::Communicator>& world_comm() {
  static std::optional<atl::comm::Communicator> world;
  return world;
}

atl::comm::Communicator& world() {
  if (!world_comm()) throw std::runtime_error("atoll_torch: MPI is not started (init_mpi)");
  return *world_comm();
}

// Whether this module started MPI (and so finalizes it).
bool& started_here() {
  static bool started = false;
  return started;
}

void init_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (world_comm()) return;
  if (initialized) {  // by another library (mpi4py): its thread level must do
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw std::runtime_error(fmt::format(
          "atoll_torch: MPI was started at thread level {} < MPI_THREAD_SERIALIZED", provided));
    }
    world_comm().emplace(atl::comm::Communicator::world());
    return;
  }
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  started_here() = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    throw std::runtime_error(
        fmt::format("atoll_torch: MPI provides thread level {} < MPI_THREAD_SERIALIZED", provided));
  }
  world_comm().emplace(atl::comm::Communicator::world());
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  world_comm().reset();
  if (started_here() && initialized && !finalized) MPI_Finalize();
}

// The group of `ranks` (world ranks, in group order; empty: every rank), checked against torch's
// view of this process's rank and the group's size.
c10::intrusive_ptr<ProcessGroupAtoll> create(std::vector<int> ranks, int group_rank, int group_size,
                                             double timeout_s) {
  auto& world = ::world();
  if (ranks.empty()) {
    for (int r = 0; r < world.size(); ++r) ranks.push_back(r);
  }
  // A group of all the ranks in order is a duplicate of the world (its own MPI context, so its
  // collectives never match another group's); any other list, a group made by its members alone.
  bool all = static_cast<int>(ranks.size()) == world.size();
  for (std::size_t i = 0; all && i < ranks.size(); ++i) all = ranks[i] == static_cast<int>(i);
  auto comm = all ? world.split(0, world.rank()) : world.subgroup(ranks);
  if (comm.rank() != group_rank || comm.size() != group_size) {
    throw std::runtime_error(fmt::format(
        "atoll_torch: torch says rank {} of {}, MPI says rank {} of {}: start the job under "
        "mpirun/srun and leave RANK and WORLD_SIZE to atoll_torch",
        group_rank, group_size, comm.rank(), comm.size()));
  }
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
  return c10::make_intrusive<ProcessGroupAtoll>(std::move(comm), timeout);
}

py::dict stats_dict(const ProcessGroupAtoll& pg) {
  const auto s = pg.stats();
  py::dict d;
  d["scheme"] = s.scheme;
  d["chosen"] = s.chosen;
  d["sparse_calls"] = s.sparse_calls;
  d["dense_calls"] = s.dense_calls;
  d["elements"] = s.elements;
  d["blocks"] = s.blocks;
  d["nnz"] = s.nnz;
  d["result_nnz"] = s.result_nnz;
  d["sync_s"] = s.sync_s;
  d["convert_s"] = s.convert_s;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  py::list phases;
  for (const auto& p : s.phases) {
    py::dict ph;
    ph["name"] = p.name;
    ph["time_s"] = p.time_s;
    ph["bytes_sent"] = p.bytes_sent;
    ph["bytes_received"] = p.bytes_received;
    phases.append(ph);
  }
  d["phases"] = phases;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  py::module_::import("torch.distributed");  // registers torch's ProcessGroup type first
  m.def("init_mpi", &init_mpi, "MPI_Init_thread (MPI_THREAD_SERIALIZED) unless already started");
  m.def("finalize_mpi", &finalize_mpi, "MPI_Finalize unless already done");
  m.def(
      "abort_job", [](int code) { atl::comm::MpiRuntime::abort_job(code); },
      "MPI_Abort: ends every rank of the job (after an uncaught exception on this one)");
  m.def("ranks_on_node", [] { return world().ranks_on_node(); });
  m.def(
      "any_rank",
      [](bool flag) {
        std::lock_guard lock(ProcessGroupAtoll::mpi_mutex());
        return world().allreduce_value<int>(flag ? 1 : 0, atl::comm::ReduceOp::max) != 0;
      },
      "whether `flag` is true on any rank of the world (collective)");
  m.def("scheme_names", [] { return atl::sync::scheme_names(); });
  m.def("world_rank", [] { return world().rank(); });
  m.def("world_size", [] { return world().size(); });
  m.def(
      "broadcast_string",
      [](std::string s, int root) {
        std::lock_guard lock(ProcessGroupAtoll::mpi_mutex());
        std::uint64_t n = s.size();
        world().broadcast(std::span<std::uint64_t>(&n, 1), root);
        s.resize(n);
        world().broadcast(std::span<char>(s.data(), s.size()), root);
        return s;
      },
      "rank `root`'s string on every rank of the world (collective)");
  py::class_<ProcessGroupAtoll, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupAtoll>>(
      m, "ProcessGroupAtoll")
      .def(py::init(&create), py::arg("ranks"), py::arg("group_rank"), py::arg("group_size"),
           py::arg("timeout_s"))
      .def("set_sparse_scheme", &ProcessGroupAtoll::set_sparse_scheme, py::arg("name"))
      .def("stats", &stats_dict);
}
