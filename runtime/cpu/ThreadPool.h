// A fixed pool of host threads for the CPU executors: parallel_for over an index range with
// dynamic scheduling (tiles differ in cost: a causal q tile near the end visits many kv tiles).
// The calling thread works too. A parallel_for issued from inside a task runs serially, so
// nesting never deadlocks; concurrent callers from outside take turns.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tilejit {

class ThreadPool {
 public:
  // `threads` counts the caller; 1 runs everything on the caller.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(i) once for each i in [0, n) and returns when all are done. The first exception
  // a task throws is rethrown here (remaining tasks still run).
  void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

  // The process-wide pool: TILEJIT_CPU_THREADS threads, else one per hardware thread.
  static ThreadPool& shared();

 private:
  struct Job;
  void worker_loop();
  static void run_tasks(Job& job);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

}  // namespace tilejit
