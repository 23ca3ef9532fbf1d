// Schedule files (include/atoll/wan/schedule_file.h): parsed; an accepted schedule must format
// and parse back to the same rounds (a parser that accepts what it cannot write back is a bug).
#include <cstdlib>
#include <string>

#include "atoll/wan/schedule_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  atl::wan::ScheduleFile s;
  try {
    s = atl::wan::parse_schedule(text, "fuzz.schedule");
  } catch (const atl::wan::ScheduleFileError&) {
    return 0;
  }
  const auto again = atl::wan::parse_schedule(atl::wan::format_schedule(s), "formatted");
  if (again.site_codes != s.site_codes || again.rounds.size() != s.rounds.size()) std::abort();
  return 0;
}
