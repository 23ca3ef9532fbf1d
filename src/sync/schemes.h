// Constructors of the individual schemes (one file each in src/sync/), used by make_scheme.
#pragma once

#include <memory>

#include "atoll/sync/scheme.h"

namespace atl::sync {

std::unique_ptr<SyncScheme> make_allreduce(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_agsparse(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_sparcml(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_omnireduce(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_sparse_ps(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_zen_coo(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_zen(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_zen_ef(const SchemeOptions&);
std::unique_ptr<SyncScheme> make_auto(const SchemeOptions&);

}  // namespace atl::sync
