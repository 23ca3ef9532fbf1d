// Config files for `atoll train --config` (src/cli/options_train.cpp).
#pragma once

#include <istream>
#include <vector>

// smpi_helpers.h (force-included in the SMPI build) defines exit() as a macro, which clashes with
// CLI11's App::exit; keep it out of CLI11's way.
#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")

namespace atl::cli {

// Config files for `atoll train --config`: JSON (an object of option names) or CLI11's TOML/INI
// (keys at the top level or under [train]); detected by the first character. Keys are the option
// names with '_' or '-' alike; an unknown key is an error naming it, never silently ignored.
// Flags on the command line override the file.
class JsonOrTomlConfig : public CLI::ConfigTOML {
 public:
  explicit JsonOrTomlConfig(const CLI::App* train) : train_(train) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override;

 private:
  std::vector<CLI::ConfigItem> parse(std::istream& in) const;
  const CLI::App* train_;
};

}  // namespace atl::cli
