// Config files for `atoll train --config` (config_file.h): JSON or TOML, every key checked.
#include "config_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace atl::cli {

std::vector<CLI::ConfigItem> JsonOrTomlConfig::from_config(std::istream& in) const {
  auto items = parse(in);
  for (auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // TOML section markers
    std::replace(item.name.begin(), item.name.end(), '_', '-');
    const auto key = item.fullname();
    if (item.parents != std::vector<std::string>{"train"}) {
      throw CLI::ConfigError(fmt::format(
          "config file: unknown section or key '{}' (keys are atoll train's options, at the "
          "top level or under [train])",
          key));
    }
    if (train_->get_option_no_throw("--" + item.name) == nullptr) {
      throw CLI::ConfigError(fmt::format(
          "config file: unknown key '{}' (not an option of atoll train; see atoll train --help)",
          item.name));
    }
  }
  return items;
}

std::vector<CLI::ConfigItem> JsonOrTomlConfig::parse(std::istream& in) const {
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') {
    std::istringstream toml(text);
    auto items = CLI::ConfigTOML::from_config(toml);
    for (auto& item : items) {
      if (item.parents.empty() && item.name != "train") item.parents = {"train"};
    }
    return items;
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw CLI::ConversionError("config file: not valid JSON (expected one object)");
  }
  std::vector<CLI::ConfigItem> items;
  for (const auto& [key, value] : j.items()) {
    CLI::ConfigItem item;
    item.parents = {"train"};
    item.name = key;
    auto scalar = [](const nlohmann::json& v) {
      if (v.is_string()) return v.get<std::string>();
      if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
      return v.dump();
    };
    if (value.is_array()) {
      for (const auto& v : value) item.inputs.push_back(scalar(v));
    } else if (value.is_object() || value.is_null()) {
      throw CLI::ConversionError("config file: value of '" + key + "' must be a scalar or list");
    } else {
      item.inputs.push_back(scalar(value));
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace atl::cli
