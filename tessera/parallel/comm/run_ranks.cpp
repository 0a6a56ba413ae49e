#include "tessera/parallel/comm/run_ranks.h"

#include <exception>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/parallel/comm/thread_communicator.h"

namespace tessera::parallel {

void run_ranks(int n, const std::function<void(std::shared_ptr<Communicator> world)>& body,
               CommOptions options) {
  std::vector<std::shared_ptr<ThreadCommunicator>> worlds =
      ThreadCommunicator::create_world(n, options);
  auto run_rank = [&](int rank) {
    std::shared_ptr<ThreadCommunicator> world = worlds[size_t(rank)];
    try {
      body(world);
    } catch (const std::exception& e) {
      world->fail(e.what());
    } catch (...) {
      world->fail("an exception that is not a std::exception");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  for (int r = 0; r < n; ++r) threads.emplace_back(run_rank, r);
  for (auto& t : threads) t.join();
  const std::string failure = worlds[0]->failure();
  if (!failure.empty()) throw Error(failure);
}

}  // namespace tessera::parallel
