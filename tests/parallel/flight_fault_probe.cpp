// mpiexec -n 4 flight_fault_probe FAULT DIR: a training step's pattern of calls over a pp2 x dp2
// layout, six steps, with one planted fault on world rank 1 at step 3; every rank's flight
// recorder dumps into DIR, and tests/tools/flight_faults_test.sh checks `tessera diagnose DIR`'s
// verdict for each FAULT:
//   none   no fault: every rank dumps at the end of the run
//   slow   rank 1 sleeps 0.15 s before every dp all-reduce (no hang: the slowest rank)
//   skip   rank 1 skips step 3's dp all-reduce and goes on to the all-gather after it
//   size   rank 1's step-3 dp all-reduce has half the elements
//   op     rank 1 calls a reduce-scatter of the same input instead
//   sleep  rank 1 sleeps 10 s before step 3's dp all-reduce, past the 1.5 s timeout
// Groups: pp = {0,1}, {2,3} (world rank / 2), dp = {0,2}, {1,3} (world rank % 2). Per step:
// pp send of the activation (f32[65536]) and recv of its gradient, the dp all-reduce of the
// gradients (f32[1048576], 4.2 MB) and all-gather of the parameters (1.0 MB), the world
// all-reduce of the loss (f64[1]). A rank whose call fails waits up to 5 s for every dump, then
// ends the job (exit 124).

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "tessera/parallel/comm/flight_watch.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

int main(int argc, char** argv) {
  parallel::MpiSession session(&argc, &argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: flight_fault_probe none|slow|skip|size|op|sleep DIR\n");
    return 2;
  }
  const std::string fault = argv[1];
  parallel::CommOptions options;
  options.timeout_seconds = 1.5;
  auto world = parallel::MpiCommunicator::world(options);
  const int rank = world->rank();
  if (world->size() != 4) {
    std::fprintf(stderr, "flight_fault_probe: run it on 4 ranks, not %d\n", world->size());
    return 2;
  }
  auto pp = world->split(rank / 2, rank, "pp");
  auto dp = world->split(rank % 2, rank, "dp");
  parallel::FlightWatch watch(*world, argv[2]);
  const bool faulty = rank == 1;

  Tensor act = zeros({65536}), grads = ones({1048576}), shard = ones({131072}),
         params = zeros({262144}), loss = zeros({1}, DType::f64);
  try {
    for (int step = 1; step <= 6; ++step) {
      world->set_step(step);
      const bool now = faulty && step == 3;
      if (pp->rank() == 0) {
        pp->send(act, 1);
        pp->recv(act, 1);
      } else {
        pp->recv(act, 0);
        pp->send(act, 0);
      }
      if (faulty && fault == "slow") sleep_s(0.15);
      if (now && fault == "sleep") sleep_s(10);
      if (now && fault == "size") {
        dp->all_reduce(ones({524288}));
      } else if (now && fault == "op") {
        dp->reduce_scatter(grads, zeros({524288}));
      } else if (!(now && fault == "skip")) {
        dp->all_reduce(grads);
      }
      dp->all_gather(shard, params);
      world->all_reduce(loss);
    }
    watch.dump("the end of the run");
    world->barrier();  // every dump is on disk before any rank exits
  } catch (const parallel::CommError& e) {
    // The failing call dumped this rank and asked the others (the recorder's failure hook).
    const std::vector<int> missing = watch.wait_for_dumps(5);
    std::fprintf(stderr, "flight_fault_probe: rank %d: %s; %zu ranks did not dump\n", rank,
                 e.what(), missing.size());
    parallel::abort_mpi_job(124);
  }
  return 0;
}
