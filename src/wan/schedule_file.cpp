#include "atoll/wan/schedule_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace atl::wan {
namespace {

constexpr const char* kMagic = "atoll-wan-schedule";

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::string format_schedule(const ScheduleFile& s) {
  std::string out = fmt::format("{} 1\nname {}\nsites", kMagic, s.name);
  for (const auto& c : s.site_codes) out += " " + c;
  out += fmt::format("\npayload_bytes {:.17g}\n", s.payload_bytes);
  if (s.rounds_to_consensus) out += fmt::format("rounds_to_consensus {}\n", *s.rounds_to_consensus);
  for (const auto& round : s.rounds) {
    out += "round\n";
    for (const auto& e : round) {
      out += e.kind == ExchangeKind::ring_allreduce ? "ring"
                                                    : fmt::format("clique {}", to_string(e.kind));
      for (auto i : e.sites) out += " " + s.site_codes.at(i);
      out += "\n";
    }
  }
  return out;
}

ScheduleFile parse_schedule(const std::string& text, const std::string& source) {
  ScheduleFile s;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  bool have_header = false, have_sites = false, have_payload = false;
  std::vector<std::size_t> group_of_site;  // in the current round: 1 + its group's index, 0 if none
  auto fail = [&](const std::string& what) {
    return ScheduleFileError(fmt::format("{}:{}: {}", source, number, what));
  };
  while (std::getline(in, line)) {
    ++number;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const auto w = words(line);
    if (w.empty()) continue;
    if (!have_header) {
      if (w.size() != 2 || w[0] != kMagic)
        throw fail(fmt::format("expected '{} 1' as the first line", kMagic));
      if (w[1] != "1") throw fail(fmt::format("unsupported format version '{}'", w[1]));
      have_header = true;
      continue;
    }
    const std::string& key = w[0];
    if (key == "name") {
      if (w.size() != 2) throw fail("'name' takes one word");
      s.name = w[1];
    } else if (key == "sites") {
      if (have_sites) throw fail("'sites' given twice");
      if (w.size() < 3) throw fail("'sites' needs at least two site codes");
      for (std::size_t i = 1; i < w.size(); ++i) {
        for (const auto& c : s.site_codes)
          if (c == w[i]) throw fail(fmt::format("site '{}' listed twice in 'sites'", w[i]));
        s.site_codes.push_back(w[i]);
      }
      have_sites = true;
    } else if (key == "payload_bytes" || key == "rounds_to_consensus") {
      if (w.size() != 2) throw fail(fmt::format("'{}' takes one number", key));
      double v = 0;
      try {
        std::size_t used = 0;
        v = std::stod(w[1], &used);
        if (used != w[1].size()) throw std::invalid_argument(w[1]);
      } catch (const std::exception&) {
        throw fail(fmt::format("{} '{}' is not a number", key, w[1]));
      }
      if (key == "payload_bytes") {
        if (!(v > 0) || !std::isfinite(v))
          throw fail(fmt::format("payload_bytes must be positive (got {})", w[1]));
        s.payload_bytes = v;
        have_payload = true;
      } else {
        if (!(v >= 1) || v != std::floor(v) || v > 1e9)  // (a larger value would not fit a count)
          throw fail(fmt::format(
              "rounds_to_consensus must be a positive integer, at most 1e9 (got {})", w[1]));
        s.rounds_to_consensus = static_cast<std::size_t>(v);
      }
    } else if (key == "round") {
      if (!have_sites) throw fail("'sites' must come before the first 'round'");
      if (w.size() != 1) throw fail("'round' takes no arguments");
      s.rounds.emplace_back();
      group_of_site.assign(s.site_codes.size(), 0);
    } else if (key == "clique" || key == "ring") {
      if (s.rounds.empty()) throw fail(fmt::format("'{}' before the first 'round'", key));
      Exchange e;
      std::size_t first = 1;
      if (key == "ring") {
        e.kind = ExchangeKind::ring_allreduce;
      } else {
        if (w.size() < 2) throw fail("'clique' needs a kind and its sites");
        if (w[1] == "multicast_fpga")
          e.kind = ExchangeKind::multicast_fpga;
        else if (w[1] == "unicast")
          e.kind = ExchangeKind::unicast;
        else
          throw fail(fmt::format(
              "unknown clique kind '{}' (a group is 'clique multicast_fpga SITES...', 'clique "
              "unicast SITES...' or 'ring SITES...')",
              w[1]));
        first = 2;
      }
      if (w.size() - first < 2) throw fail(fmt::format("a {} needs at least two sites", key));
      for (std::size_t i = first; i < w.size(); ++i) {
        std::size_t index = s.site_codes.size();
        for (std::size_t j = 0; j < s.site_codes.size(); ++j)
          if (s.site_codes[j] == w[i]) index = j;
        if (index == s.site_codes.size())
          throw fail(fmt::format("unknown site '{}' (not in 'sites')", w[i]));
        const std::size_t group = s.rounds.back().size() + 1;
        if (group_of_site[index] == group) {
          throw fail(fmt::format("site '{}' is listed twice in one group of round {}", w[i],
                                 s.rounds.size()));
        }
        if (group_of_site[index] != 0) {
          throw fail(fmt::format("site '{}' is in two groups of round {}", w[i], s.rounds.size()));
        }
        group_of_site[index] = group;
        e.sites.push_back(index);
      }
      s.rounds.back().push_back(std::move(e));
    } else {
      throw fail(fmt::format("unknown keyword '{}'", key));
    }
  }
  if (!have_header) throw ScheduleFileError(source + ": empty schedule file");
  if (!have_sites) throw ScheduleFileError(source + ": no 'sites' line");
  if (!have_payload) throw ScheduleFileError(source + ": no 'payload_bytes' line");
  if (s.rounds.empty()) throw ScheduleFileError(source + ": no 'round'");
  for (std::size_t r = 0; r < s.rounds.size(); ++r) {
    if (s.rounds[r].empty())
      throw ScheduleFileError(fmt::format("{}: round {} has no group", source, r + 1));
  }
  return s;
}

void write_schedule_file(const std::filesystem::path& file, const ScheduleFile& schedule) {
  const std::string text = format_schedule(schedule);
  auto tmp = file;
  tmp += fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw ScheduleFileError("cannot write schedule file " + tmp.string());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw ScheduleFileError(fmt::format("cannot rename {} to {}", tmp.string(), file.string()));
  }
}

ScheduleFile read_schedule_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ScheduleFileError("cannot read schedule file " + file.string());
  std::stringstream text;
  text << in.rdbuf();
  return parse_schedule(text.str(), file.string());
}

std::vector<ResolvedRound> rounds_on(const ScheduleFile& s, const Topology& t) {
  std::vector<std::size_t> map;
  for (const auto& code : s.site_codes) {
    try {
      map.push_back(t.index_of(code));
    } catch (const TopologyError& e) {
      throw ScheduleFileError(fmt::format("schedule '{}': {}", s.name, e.what()));
    }
  }
  auto out = s.rounds;
  for (auto& round : out)
    for (auto& e : round)
      for (auto& i : e.sites) i = map[i];
  return out;
}

ScheduleFile to_schedule_file(const Topology& t, const EvaluatedSchedule& e, double payload_bytes) {
  ScheduleFile f;
  f.name = e.name;
  for (const auto& s : t.sites()) f.site_codes.push_back(s.code);
  f.payload_bytes = payload_bytes;
  f.rounds_to_consensus = e.rounds;
  f.rounds = e.resolved;
  return f;
}

}  // namespace atl::wan
