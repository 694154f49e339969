#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>

namespace tilejit {

namespace {
thread_local bool in_task = false;
}  // namespace

struct ThreadPool::Job {
  int64_t n = 0;
  const std::function<void(int64_t)>* body = nullptr;
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_tasks(Job& job) {
  bool was_in_task = in_task;
  in_task = true;
  for (int64_t i = job.next++; i < job.n; i = job.next++) {
    try {
      (*job.body)(i);
    } catch (...) {
      std::lock_guard lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
  }
  in_task = was_in_task;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    Job* job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || (job_ && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      job = job_;
      ++busy_;
    }
    run_tasks(*job);
    {
      std::lock_guard lock(mutex_);
      --busy_;
    }
    finished_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  if (n <= 0) return;
  if (in_task || workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::lock_guard call(call_mutex_);
  Job job;
  job.n = n;
  job.body = &body;
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    ++generation_;
  }
  wake_.notify_all();
  run_tasks(job);
  {
    // Every index is claimed; wait for the workers still running one, then retire the job so
    // a late-waking worker never sees it.
    std::unique_lock lock(mutex_);
    job_ = nullptr;
    finished_.wait(lock, [&] { return busy_ == 0; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

ThreadPool& ThreadPool::shared() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("TILEJIT_CPU_THREADS")) {
      int t = std::atoi(env);
      if (t > 0) return t;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace tilejit
