// atl::train::train in build/atoll: the settings are checked on every rank first (free of
// LibTorch, so a rejected run ends in a fraction of a second), then the trainer module
// (build/atoll-trainer.so, beside the executable: trainer_module.cpp) is loaded on every rank and
// runs. A rank that cannot load it makes every rank stop with its loader's message.
#include <dlfcn.h>

#include <filesystem>
#include <optional>
#include <string>

#include "atoll/train/trainer.h"
#include "settings.h"

namespace atl::train {
namespace {

using Entry = int (*)(comm::Communicator&, const TrainConfig&);

// The module beside this executable (found through /proc/self/exe, so a copied or installed
// build directory works as a whole).
std::filesystem::path module_path() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : exe.parent_path()) / "atoll-trainer.so";
}

// The module's entry, or the reason it cannot be had.
Entry load_entry(std::optional<std::string>& error) {
  const auto path = module_path();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open until the exit
  if (handle == nullptr) {
    const char* why = dlerror();
    error = "cannot load the trainer module " + path.string() + ": " +
            (why != nullptr ? why : "unknown error") + " (rebuild with scripts/build)";
    return nullptr;
  }
  auto* entry = reinterpret_cast<Entry>(dlsym(handle, "atoll_trainer_run"));
  if (entry == nullptr) error = "the trainer module " + path.string() + " has no atoll_trainer_run";
  return entry;
}

}  // namespace

int train(comm::Communicator& comm, const TrainConfig& cfg) {
  check_run(comm, cfg);
  std::optional<std::string> error;
  const Entry entry = load_entry(error);
  comm.agree(error);
  return entry(comm, cfg);
}

}  // namespace atl::train
