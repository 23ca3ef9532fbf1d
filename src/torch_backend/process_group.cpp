#include "process_group.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/SparseTensorUtils.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/ivalue.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <span>

#include "atoll/comm/watchdog.h"
#include "sparse_tensor.h"

namespace atl::torch_backend {

namespace {

using Clock = std::chrono::steady_clock;

// A completed Work whose future holds `tensors` (what DDP's reducer reads).
c10::intrusive_ptr<c10d::Work> done(const std::vector<at::Tensor>& tensors) {
  auto future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  future->markCompleted(c10::IValue(tensors));
  return c10d::Work::create_from_future(future);
}

[[noreturn]] void not_implemented(const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "the atoll backend does not implement ", op,
                              " (it has allreduce, broadcast, allgather and barrier)");
}

// Runs f; the communicator layer's and the schemes' errors become c10::Error (RuntimeError in
// Python) whose message names the collective.
template <class F>
void guarded(const char* op, F&& f) {
  try {
    f();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "atoll ", op, ": ", e.what());
  }
}

constexpr std::size_t kMaxDims = 8;
constexpr std::array<const char*, 5> kCollectiveNames = {"allreduce", "broadcast", "allgather",
                                                         "_allgather_base", "barrier"};

// What is wrong with a call's tensor list on this rank alone (agreed over the group before any
// data moves). `in_place`: the result is written back into the tensor.
std::optional<std::string> local_problem(const std::vector<at::Tensor>& tensors, bool in_place) {
  if (tensors.size() != 1) return fmt::format("takes one tensor per call, not {}", tensors.size());
  const at::Tensor& t = tensors[0];
  if (!t.device().is_cpu())
    return fmt::format("the tensor is on {}, atoll takes CPU tensors", t.device().str());
  if (t.dim() > static_cast<std::int64_t>(kMaxDims))
    return fmt::format("{} dimensions: atoll takes at most {}", t.dim(), kMaxDims);
  if (in_place && t.layout() == at::kStrided && at::has_internal_overlap(t) == at::MemOverlap::Yes)
    return "the tensor overlaps itself (expanded): its elements cannot each take a result";
  return std::nullopt;
}

// Writes into tensors the caller passed as autograd leaves or views: the data only, as Gloo's
// direct writes do (no in-place check, no change to their autograd history).
using RawWrite = at::AutoDispatchBelowADInplaceOrView;

// A call as a fixed-size record, so that one allgather compares the ranks' calls: which
// collective, the tensor's kind, dtype and shape, one more number (the op, the root) and, for a
// sparse allreduce, the scheme each rank has set.
struct Descriptor {
  std::int64_t problem = 0;  // this rank has a local problem (sent by agree())
  std::int64_t collective = 0, tensor = 0, sparse = 0, dtype = 0, sparse_dim = 0, dim = 0;
  std::int64_t extra = 0, scheme = -1;
  std::array<std::int64_t, kMaxDims> sizes{};

  bool same(const Descriptor& o) const {
    return collective == o.collective && tensor == o.tensor && sparse == o.sparse &&
           dtype == o.dtype && sparse_dim == o.sparse_dim && dim == o.dim && extra == o.extra &&
           scheme == o.scheme && sizes == o.sizes;
  }
  std::string str(const char* extra_name) const {
    std::string s = kCollectiveNames[static_cast<std::size_t>(collective)];
    if (tensor) {
      std::vector<std::int64_t> shown(sizes.begin(), sizes.begin() + dim);
      s += fmt::format(" of a {} {} [{}]", sparse ? "sparse" : "dense",
                       c10::toString(static_cast<c10::ScalarType>(dtype)), fmt::join(shown, ", "));
    }
    if (extra_name) s += fmt::format(", {} {}", extra_name, extra);
    if (scheme >= 0) s += ", scheme " + sync::scheme_names()[static_cast<std::size_t>(scheme)];
    return s;
  }
};

Descriptor describe(Collective c, const at::Tensor* t, std::int64_t extra, std::int64_t scheme) {
  Descriptor d;
  d.collective = static_cast<std::int64_t>(c);
  d.extra = extra;
  d.scheme = scheme;
  if (!t) return d;
  d.tensor = 1;
  d.sparse = t->layout() == at::kSparse;
  d.dtype = static_cast<std::int64_t>(t->scalar_type());
  d.sparse_dim = d.sparse ? t->sparse_dim() : 0;
  d.dim = t->dim();
  for (std::int64_t k = 0; k < t->dim(); ++k) d.sizes[static_cast<std::size_t>(k)] = t->size(k);
  return d;
}

template <class T>
void allreduce_as(comm::Communicator& c, at::Tensor& t, comm::ReduceOp op) {
  c.allreduce(std::span<T>(t.data_ptr<T>(), static_cast<std::size_t>(t.numel())), op);
}

}  // namespace

std::mutex& ProcessGroupAtoll::mpi_mutex() {
  static std::mutex m;
  return m;
}

ProcessGroupAtoll::ProcessGroupAtoll(comm::Communicator comm, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(comm.rank(), comm.size()), comm_(std::move(comm)) {
  // torch's timeout bounds every collective through the communicator layer's watchdog, which is
  // process-wide: the largest timeout of the groups made so far.
  const double seconds = static_cast<double>(timeout.count()) / 1000.0;
  comm::set_comm_timeout(std::max(comm::comm_timeout(), seconds));
  set_sparse_scheme("zen");
}

ProcessGroupAtoll::~ProcessGroupAtoll() {
  std::lock_guard lock(mpi_mutex());
  auto freed = std::move(comm_);  // MPI_Comm_free, under the lock
}

void ProcessGroupAtoll::set_sparse_scheme(const std::string& name) {
  auto scheme = sync::make_scheme(name);  // std::invalid_argument naming the valid ones
  const auto& names = sync::scheme_names();
  std::lock_guard lock(mpi_mutex());
  scheme_ = std::move(scheme);
  scheme_index_ = std::find(names.begin(), names.end(), name) - names.begin();
  stats_.scheme = name;
}

BackendStats ProcessGroupAtoll::stats() const {
  std::lock_guard lock(mpi_mutex());
  return stats_;
}

// Problems found on this rank alone are agreed first (so every rank raises the same error); then
// one allgather of the descriptors.
void ProcessGroupAtoll::check_same_call(Collective c, const at::Tensor* t,
                                        const std::optional<std::string>& problem,
                                        const char* extra_name, std::int64_t extra,
                                        std::int64_t scheme) {
  const char* op = kCollectiveNames[static_cast<std::size_t>(c)];
  Descriptor mine = describe(c, problem ? nullptr : t, extra, scheme);
  mine.problem = problem.has_value();
  const auto all = comm_.allgather(mine);
  bool any_problem = false;
  for (const auto& d : all) any_problem = any_problem || d.problem;
  if (any_problem) {
    try {
      comm_.agree(problem);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "atoll ", op, ": ", e.what());
    }
  }
  for (std::size_t r = 1; r < all.size(); ++r) {
    TORCH_CHECK(all[r].same(all[0]), "atoll ", op, ": the ranks' calls differ: rank 0 called ",
                all[0].str(extra_name), ", rank ", r, " called ", all[r].str(extra_name));
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  std::lock_guard lock(mpi_mutex());
  const auto op = static_cast<c10d::ReduceOp::RedOpType>(opts.reduceOp);
  std::optional<std::string> problem = local_problem(tensors, true);
  at::Tensor* t = problem ? nullptr : &tensors[0];
  if (problem) {
  } else if (t->layout() == at::kSparse) {
    if (op != c10d::ReduceOp::SUM)
      problem = "a sparse tensor can only be summed (ReduceOp.SUM)";
    else if (t->scalar_type() != at::kFloat)
      problem = fmt::format("sparse allreduce sums float32 values, not {}",
                            c10::toString(t->scalar_type()));
  } else if (t->layout() != at::kStrided) {
    problem = "the tensor is neither dense (strided) nor sparse COO";
  } else if (op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::MIN && op != c10d::ReduceOp::MAX) {
    problem = "dense allreduce takes ReduceOp SUM, MIN or MAX";
  } else if (t->scalar_type() != at::kFloat && t->scalar_type() != at::kDouble &&
             t->scalar_type() != at::kInt && t->scalar_type() != at::kLong &&
             t->scalar_type() != at::kByte) {
    problem = fmt::format("dense allreduce takes float32, float64, int32, int64 or uint8, not {}",
                          c10::toString(t->scalar_type()));
  }
  const bool sparse = t && t->layout() == at::kSparse;
  check_same_call(Collective::allreduce, t, problem, "op", static_cast<std::int64_t>(op),
                  sparse ? scheme_index_ : -1);
  guarded("allreduce", [&] {
    if (sparse)
      allreduce_sparse(*t);
    else
      allreduce_dense(*t, opts.reduceOp);
  });
  return done(tensors);
}

void ProcessGroupAtoll::allreduce_dense(at::Tensor& tensor, const c10d::ReduceOp& reduce_op) {
  const auto r = static_cast<c10d::ReduceOp::RedOpType>(reduce_op);
  const comm::ReduceOp op = r == c10d::ReduceOp::MIN   ? comm::ReduceOp::min
                            : r == c10d::ReduceOp::MAX ? comm::ReduceOp::max
                                                       : comm::ReduceOp::sum;
  RawWrite raw;
  at::Tensor t = tensor.contiguous();
  switch (t.scalar_type()) {
    case at::kFloat:
      allreduce_as<float>(comm_, t, op);
      break;
    case at::kDouble:
      allreduce_as<double>(comm_, t, op);
      break;
    case at::kInt:
      allreduce_as<std::int32_t>(comm_, t, op);
      break;
    case at::kLong:
      allreduce_as<std::int64_t>(comm_, t, op);
      break;
    default:
      allreduce_as<std::uint8_t>(comm_, t, op);
      break;
  }
  if (!t.is_same(tensor)) tensor.copy_(t);
  ++stats_.dense_calls;
}

void ProcessGroupAtoll::allreduce_sparse(at::Tensor& tensor) {
  std::uint64_t elements = 1;
  for (const auto s : tensor.sizes()) elements *= static_cast<std::uint64_t>(s);
  RawWrite raw;
  if (elements == 0) {  // nothing to sum (every rank has the same shape): coalesced as it is
    if (!tensor.is_coalesced()) {
      const at::Tensor c = tensor.coalesce();
      at::sparse::get_sparse_impl(tensor)->set_indices_and_values_unsafe(c._indices(), c._values());
    }
    tensor._coalesced_(true);
  } else if (elements <= sparse::max_elements<std::uint32_t>()) {
    allreduce_sparse_as<std::uint32_t>(tensor);
  } else {
    allreduce_sparse_as<std::uint64_t>(tensor);
  }
}

template <class Index>
void ProcessGroupAtoll::allreduce_sparse_as(at::Tensor& tensor) {
  auto& [grad, result] = [this]() -> auto& {
    if constexpr (std::is_same_v<Index, std::uint32_t>)
      return buffers32_;
    else
      return buffers64_;
  }
  ();
  const auto t0 = Clock::now();
  SparseShape shape;
  to_gradient<Index>(tensor, shape, grad);
  const auto t1 = Clock::now();
  scheme_->synchronize(comm_, grad, result);
  const auto t2 = Clock::now();
  set_sum(tensor, result);
  const auto t3 = Clock::now();
  const auto s = [](auto d) { return std::chrono::duration<double>(d).count(); };
  ++stats_.sparse_calls;
  stats_.chosen = result.stats.chosen.empty() ? std::string(scheme_->name()) : result.stats.chosen;
  stats_.elements = shape.elements;
  stats_.blocks = static_cast<std::uint64_t>(shape.blocks);
  stats_.nnz = grad.value_count();  // elements, whether rows or elements travelled
  stats_.result_nnz = result.dense_form ? result.dense.size() : result.sparse.value_count();
  stats_.sync_s = s(t2 - t1);
  stats_.convert_s = s(t1 - t0) + s(t3 - t2);
  stats_.bytes_sent = result.stats.bytes_sent();
  stats_.bytes_received = result.stats.bytes_received();
  stats_.phases = result.stats.phases;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  std::lock_guard lock(mpi_mutex());
  std::optional<std::string> problem = local_problem(tensors, true);
  at::Tensor* t = problem ? nullptr : &tensors[0];
  if (!problem && t->layout() != at::kStrided) problem = "broadcast takes dense tensors";
  if (!problem && (opts.rootRank < 0 || opts.rootRank >= size_))
    problem = fmt::format("root {} is not a rank of the group (size {})", opts.rootRank, size_);
  check_same_call(Collective::broadcast, t, problem, "root", opts.rootRank, -1);
  guarded("broadcast", [&] {
    RawWrite raw;
    at::Tensor c = t->contiguous();
    comm_.broadcast(std::span<std::uint8_t>(static_cast<std::uint8_t*>(c.data_ptr()), c.nbytes()),
                    static_cast<int>(opts.rootRank));
    if (!c.is_same(*t)) t->copy_(c);
  });
  return done(tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  std::lock_guard lock(mpi_mutex());
  std::optional<std::string> problem = local_problem(inputs, false);
  const at::Tensor* in = problem ? nullptr : &inputs[0];
  if (!problem && in->layout() != at::kStrided) problem = "allgather takes dense tensors";
  if (!problem && (outputs.size() != 1 || outputs[0].size() != static_cast<std::size_t>(size_)))
    problem = fmt::format("allgather needs one list of {} output tensors", size_);
  for (std::size_t r = 0; !problem && r < outputs[0].size(); ++r) {
    const auto& o = outputs[0][r];
    if (o.layout() != at::kStrided || o.scalar_type() != in->scalar_type() ||
        o.numel() != in->numel() || !o.device().is_cpu() ||
        at::has_internal_overlap(o) == at::MemOverlap::Yes)
      problem = fmt::format(
          "output tensor {} is not a dense CPU tensor of the input's dtype and "
          "size (or overlaps itself)",
          r);
  }
  check_same_call(Collective::allgather, in, problem, nullptr, 0, -1);
  guarded("allgather", [&] {
    RawWrite raw;
    const at::Tensor c = in->contiguous();
    const auto bytes = c.nbytes();
    const auto all = comm_.allgather_each(
        std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(c.data_ptr()), bytes));
    for (int r = 0; r < size_; ++r) {
      at::Tensor& o = outputs[0][static_cast<std::size_t>(r)];
      at::Tensor oc = o.contiguous();
      std::memcpy(oc.data_ptr(), all.data() + static_cast<std::size_t>(r) * bytes, bytes);
      if (!oc.is_same(o)) o.copy_(oc);
    }
  });
  return done(outputs[0]);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  std::lock_guard lock(mpi_mutex());
  std::optional<std::string> problem = local_problem({input}, false);
  if (!problem && (input.layout() != at::kStrided || output.layout() != at::kStrided ||
                   !output.device().is_cpu() || output.scalar_type() != input.scalar_type() ||
                   !output.is_contiguous() || output.numel() != input.numel() * size_)) {
    problem =
        "_allgather_base needs dense CPU tensors, the output contiguous, of the input's "
        "dtype and world size times its elements";
  }
  check_same_call(Collective::allgather_base, problem ? nullptr : &input, problem, nullptr, 0, -1);
  guarded("_allgather_base", [&] {
    RawWrite raw;
    const at::Tensor c = input.contiguous();
    const auto all = comm_.allgather_each(
        std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(c.data_ptr()), c.nbytes()));
    std::memcpy(output.data_ptr(), all.data(), all.size());
  });
  return done({output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::barrier(const c10d::BarrierOptions& opts) {
  std::lock_guard lock(mpi_mutex());
  check_same_call(Collective::barrier, nullptr, std::nullopt, nullptr, 0, -1);
  return done({});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::allreduce_coalesced(
    std::vector<at::Tensor>&, const c10d::AllreduceCoalescedOptions&) {
  not_implemented("allreduce_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::reduce(std::vector<at::Tensor>&,
                                                         const c10d::ReduceOptions&) {
  not_implemented("reduce");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
    const c10d::AllgatherOptions&) {
  not_implemented("allgather_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::gather(std::vector<std::vector<at::Tensor>>&,
                                                         std::vector<at::Tensor>&,
                                                         const c10d::GatherOptions&) {
  not_implemented("gather");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::scatter(std::vector<at::Tensor>&,
                                                          std::vector<std::vector<at::Tensor>>&,
                                                          const c10d::ScatterOptions&) {
  not_implemented("scatter");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::reduce_scatter(
    std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
    const c10d::ReduceScatterOptions&) {
  not_implemented("reduce_scatter");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::_reduce_scatter_base(
    at::Tensor&, at::Tensor&, const c10d::ReduceScatterOptions&) {
  not_implemented("_reduce_scatter_base");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::alltoall_base(at::Tensor&, at::Tensor&,
                                                                std::vector<int64_t>&,
                                                                std::vector<int64_t>&,
                                                                const c10d::AllToAllOptions&) {
  not_implemented("alltoall_base");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::alltoall(std::vector<at::Tensor>&,
                                                           std::vector<at::Tensor>&,
                                                           const c10d::AllToAllOptions&) {
  not_implemented("alltoall");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::send(std::vector<at::Tensor>&, int, int) {
  not_implemented("send");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::recv(std::vector<at::Tensor>&, int, int) {
  not_implemented("recv");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupAtoll::recvAnysource(std::vector<at::Tensor>&, int) {
  not_implemented("recvAnysource");
}

}  // namespace atl::torch_backend
