#pragma once
// Agreeing on a verdict that each rank reached on its own share of the work: every rank passes
// its error (empty: none), and every rank gets back the same answer, the lowest failing rank and
// its message. A job whose ranks each checksum a share of a checkpoint's files uses it so that
// all of them pass over a corrupt checkpoint together, or fail together with the one line that
// says why, instead of some loading it and the rest waiting in a collective that never comes.

#include <functional>
#include <string>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

struct RankError {
  int rank = -1;  // -1: no rank failed
  std::string message;
  explicit operator bool() const { return rank >= 0; }
};

// Collective over `group`: an all-reduce finds the lowest failing rank, which then broadcasts
// its message (two broadcasts: its length, then its bytes). One process returns its own.
RankError first_rank_error(Communicator& group, const std::string& mine);

// Runs `work` on this rank, then agrees: when it threw on any rank of `group`, every rank
// throws an Error with the lowest failing rank's message ("... (on rank 3)" in a group of
// several). Whatever `work` throws is caught, so that every rank reaches the agreement.
// Collective over `group`.
void run_agreeing(Communicator& group, const std::function<void()>& work);

}  // namespace tessera::parallel
