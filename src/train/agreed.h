// A local failure on the training path becomes the same error on every rank. Private to src/train.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <optional>
#include <string>

#include "atoll/comm/communicator.h"

namespace atl::train {

// Runs `f` on this rank; any exception becomes the same CollectiveError on every rank. LibTorch's
// own errors lose their C++ stack trace (c10::Error::what() carries one): the message is for users.
template <class F>
void agreed(comm::Communicator& comm, F&& f) {
  std::optional<std::string> problem;
  try {
    f();
  } catch (const c10::Error& e) {
    problem = e.what_without_backtrace();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  comm.agree(problem);
}

}  // namespace atl::train
