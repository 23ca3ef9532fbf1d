// simulate(): validates the input and runs atoll-wan-sim-engine as a child process (see
// simulator.h for why), passing the request as JSON on its stdin and reading the result from its
// stdout. The SimGrid side is src/wan/simgrid_engine.cpp.
#include "atoll/wan/simulator.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "sim_protocol.h"

#ifndef ATOLL_WAN_SIM_ENGINE
#define ATOLL_WAN_SIM_ENGINE "atoll-wan-sim-engine"
#endif

extern char** environ;

namespace atl::wan {
namespace sim_protocol {

nlohmann::json request_to_json(const Topology& t, const std::vector<ResolvedRound>& period,
                               const SimulationOptions& o) {
  nlohmann::json sites = nlohmann::json::array();
  for (const auto& s : t.sites()) {
    sites.push_back({{"code", s.code},
                     {"name", s.name},
                     {"continent", s.continent},
                     {"latitude_deg", s.latitude_deg},
                     {"longitude_deg", s.longitude_deg},
                     {"egress_bytes_per_s", s.egress_bytes_per_s},
                     {"ingress_bytes_per_s", s.ingress_bytes_per_s},
                     {"fpga_memory_bytes", s.fpga_memory_bytes}});
  }
  std::vector<double> latency;
  for (std::size_t i = 0; i < t.size(); ++i)
    for (std::size_t j = 0; j < t.size(); ++j) latency.push_back(t.latency_s(i, j));
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& r : period) {
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& e : r)
      groups.push_back({{"kind", static_cast<int>(e.kind)}, {"sites", e.sites}});
    rounds.push_back(groups);
  }
  return {{"sites", sites},
          {"latency_s", latency},
          {"period", rounds},
          {"payload_bytes", o.round.payload_bytes},
          {"chunk_bytes", o.round.chunk_bytes},
          {"compute_s", o.round.compute_s},
          {"rounds", o.rounds},
          {"throttle", o.throttle},
          {"flow_level_unicast", o.flow_level_unicast},
          {"unicast_segment_bytes", o.unicast_segment_bytes}};
}

Request request_from_json(const nlohmann::json& j) {
  std::vector<Site> sites;
  for (const auto& s : j.at("sites")) {
    Site x;
    x.code = s.at("code");
    x.name = s.at("name");
    x.continent = s.at("continent");
    x.latitude_deg = s.at("latitude_deg");
    x.longitude_deg = s.at("longitude_deg");
    x.egress_bytes_per_s = s.at("egress_bytes_per_s");
    x.ingress_bytes_per_s = s.at("ingress_bytes_per_s");
    x.fpga_memory_bytes = s.at("fpga_memory_bytes");
    sites.push_back(std::move(x));
  }
  Topology t(std::move(sites));
  t.set_latency_matrix(j.at("latency_s").get<std::vector<double>>());
  std::vector<ResolvedRound> period;
  for (const auto& r : j.at("period")) {
    ResolvedRound round;
    for (const auto& g : r) {
      round.push_back(Exchange{static_cast<ExchangeKind>(g.at("kind").get<int>()),
                               g.at("sites").get<Clique>()});
    }
    period.push_back(std::move(round));
  }
  SimulationOptions o;
  o.round.payload_bytes = j.at("payload_bytes");
  o.round.chunk_bytes = j.at("chunk_bytes");
  o.round.compute_s = j.at("compute_s");
  o.rounds = j.at("rounds");
  o.throttle = j.at("throttle");
  o.flow_level_unicast = j.at("flow_level_unicast");
  o.unicast_segment_bytes = j.at("unicast_segment_bytes");
  return {std::move(t), std::move(period), o};
}

nlohmann::json result_to_json(const SimulationResult& r) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& x : r.rounds) {
    rounds.push_back({{"time_s", x.time_s},
                      {"peak_buffer_bytes", x.peak_buffer_bytes},
                      {"overflow_bytes", x.overflow_bytes}});
  }
  return {{"rounds", rounds},
          {"total_time_s", r.total_time_s},
          {"messages", r.messages},
          {"wall_s", r.wall_s}};
}

SimulationResult result_from_json(const nlohmann::json& j) {
  SimulationResult r;
  for (const auto& x : j.at("rounds")) {
    r.rounds.push_back({x.at("time_s").get<double>(),
                        x.at("peak_buffer_bytes").get<std::vector<double>>(),
                        x.at("overflow_bytes").get<double>()});
  }
  r.total_time_s = j.at("total_time_s");
  r.messages = j.at("messages");
  r.wall_s = j.at("wall_s");
  return r;
}

}  // namespace sim_protocol

namespace {

void validate(const Topology& t, const std::vector<ResolvedRound>& period,
              const SimulationOptions& o) {
  if (!(o.round.payload_bytes > 0) || !std::isfinite(o.round.payload_bytes))
    throw std::invalid_argument(
        fmt::format("payload must be positive (got {})", o.round.payload_bytes));
  if (o.unicast_segment_bytes == 0)
    throw std::invalid_argument("unicast segment size must be positive");
  // chunk_bytes 0: each multicast clique's own unit (round_model.h), at least payload / 4096.
  if (o.round.chunk_bytes > 0 &&
      o.round.payload_bytes / static_cast<double>(o.round.chunk_bytes) > 1e6) {
    throw std::invalid_argument(fmt::format(
        "payload {:g} B in chunks of {} B is more than a million chunks per sender; use a larger "
        "--chunk-bytes",
        o.round.payload_bytes, o.round.chunk_bytes));
  }
  if (o.rounds == 0) throw std::invalid_argument("simulate at least one round");
  if (period.empty()) throw std::invalid_argument("a schedule needs at least one round");
  for (std::size_t r = 0; r < period.size(); ++r) {
    Partition p;
    for (const auto& e : period[r]) {
      if (e.sites.size() < 2) {
        throw std::invalid_argument(
            fmt::format("round {}: a group needs at least two sites", r + 1));
      }
      p.push_back(e.sites);
      if (e.kind == ExchangeKind::multicast_fpga) {
        const auto cost = clique_cost(t, e.sites, Transport::multicast_fpga, o.round);
        if (!cost.feasible) {
          throw std::invalid_argument(fmt::format(
              "round {}: FPGA memory too small for a multicast clique of {} sites (each member "
              "needs one {}-byte chunk per inbound stream and room for the skew)",
              r + 1, e.sites.size(), cost.chunk_bytes));
        }
      }
    }
    try {
      validate_partition(p, t.size());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("round {}: {}", r + 1, e.what()));
    }
  }
}

}  // namespace

SimulationResult simulate(const Topology& t, const std::vector<ResolvedRound>& period,
                          const SimulationOptions& o) {
  validate(t, period, o);
  const std::string request = sim_protocol::request_to_json(t, period, o).dump();
  const std::string engine = o.engine_path.empty() ? ATOLL_WAN_SIM_ENGINE : o.engine_path;
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) throw SimulationError("pipe failed");
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    throw SimulationError("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  char* argv[] = {const_cast<char*>(engine.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, engine.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  if (rc != 0) {
    close(to_child[1]);
    close(from_child[0]);
    throw SimulationError(
        fmt::format("cannot start the simulation engine {}: {}", engine, std::strerror(rc)));
  }
  // Write the request and read the reply together (either may exceed a pipe's buffer).
  std::string reply;
  std::size_t written = 0;
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  bool writing = true;
  for (;;) {
    pollfd fds[2] = {{from_child[0], POLLIN, 0}, {writing ? to_child[1] : -1, POLLOUT, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (writing && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = write(to_child[1], request.data() + written, request.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (n < 0 || written == request.size()) {
        close(to_child[1]);
        writing = false;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[65536];
      const ssize_t n = read(from_child[0], buffer, sizeof buffer);
      if (n > 0) {
        reply.append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
  }
  if (writing) close(to_child[1]);
  close(from_child[0]);
  sigaction(SIGPIPE, &previous, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw SimulationError(
        fmt::format("the simulation engine {} failed ({}); its messages are above", engine,
                    WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                      : fmt::format("signal {}", WTERMSIG(status))));
  }
  try {
    return sim_protocol::result_from_json(nlohmann::json::parse(reply));
  } catch (const nlohmann::json::exception& e) {
    throw SimulationError(fmt::format("unreadable reply from the simulation engine: {}", e.what()));
  }
}

}  // namespace atl::wan
