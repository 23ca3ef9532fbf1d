#include "mesh.h"

namespace atl::train {

Mesh::Mesh(comm::Communicator& world, int group_size)
    : world_(world),
      group_size_(group_size),
      workers_(world.size() / group_size),
      worker_(world.rank() / group_size) {
  if (group_size_ <= 1) return;
  const int index = world.rank() % group_size_;
  group_.emplace(world.split(worker_, index));
  sync_.emplace(world.split(index, worker_));
}

}  // namespace atl::train
