#include "server/service/call_queues.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

void CallQueues::AddQueues(grpc::ServerBuilder* builder, int n) {
  for (int i = 0; i < std::max(n, 1); ++i) {
    auto queue = std::make_unique<Queue>();
    queue->cq = builder->AddCompletionQueue();
    queues_.push_back(std::move(queue));
  }
}

int CallQueues::AddMethod(Poster poster, int posted) {
  methods_.push_back({std::move(poster), std::max(posted, 1)});
  return static_cast<int>(methods_.size()) - 1;
}

void CallQueues::Post(int method, size_t queue) {
  Queue& q = *queues_[queue];
  MutexLock lock(&q.mu);
  if (!q.open) return;
  live_.fetch_add(1, std::memory_order_acq_rel);
  methods_[method].poster(q.cq.get(), queue, method);
}

void CallQueues::Drain(grpc::ServerCompletionQueue* cq) {
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) {
    const auto* t = static_cast<const Tag*>(tag);
    t->op->Proceed(t->event, ok);
  }
}

void CallQueues::Start() {
  for (size_t i = 0; i < queues_.size(); ++i) {
    Queue* queue = queues_[i].get();
    {
      MutexLock lock(&queue->mu);
      queue->open = true;
    }
    for (size_t m = 0; m < methods_.size(); ++m) {
      for (int k = 0; k < methods_[m].posted; ++k) Post(static_cast<int>(m), i);
    }
    queue->thread = std::thread([queue] { Drain(queue->cq.get()); });
    // Named before Start returns (the server says it is serving only
    // after), so whoever lists the threads then sees every one named.
    const std::string name = absl::StrCat("grpc-calls-", i);
    pthread_setname_np(queue->thread.native_handle(), name.c_str());
  }
}

void CallQueues::Stop() {
  if (std::exchange(stopped_, true)) return;
  bool started = false;
  for (auto& queue : queues_) {
    MutexLock lock(&queue->mu);
    queue->open = false;
    started = started || queue->thread.joinable();
  }
  // Every call answered and gone first, the threads still serving: an
  // operation started on a queue that is shut down aborts the process.
  for (int waited = 1; started && live_.load(std::memory_order_acquire) > 0; ++waited) {
    if (waited % 2500 == 0) {
      spdlog::warn("{} gRPC calls still not finished after the server stopped",
                   live_.load(std::memory_order_acquire));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  for (auto& queue : queues_) queue->cq->Shutdown();
  for (auto& queue : queues_) {
    if (queue->thread.joinable()) {
      queue->thread.join();
    } else {
      Drain(queue->cq.get());  // Never started.
    }
  }
}

int DefaultCallThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace cuckoo::server
