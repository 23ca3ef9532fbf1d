// Named points where a process can be made to fail on purpose (--inject-fault kill:... and
// stop:..., the kill matrix of docs/reliability.md): the sparse schemes' phases (every PhaseScope:
// "push", "aggregate", "pull", ...) and the trainer's "backward", "dense_sync", "outer_sync" and
// "checkpoint". Nothing happens unless this process was armed; an armed point prints what it does
// to stderr, then raises SIGKILL (a dead process) or SIGSTOP (a frozen or unreachable one).
#pragma once

#include <string>
#include <string_view>

namespace atl::util {

enum class FaultSignal { kill, stop };

// Arms this process: the first time `phase` is reached during step `step` (set_fault_step), it
// raises `signal`. `who` names the process in the message ("rank 1").
void arm_fault_point(FaultSignal signal, std::string phase, int step, std::string who);
// The step now running (the trainer's step, a benchmark's repetition; 1-based).
void set_fault_step(int step);
// A named point; raises the armed signal when it matches.
void fault_point(std::string_view phase);

}  // namespace atl::util
