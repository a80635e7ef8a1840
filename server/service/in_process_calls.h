// InProcessCalls: unary client calls over the server's in-process channel
// (the Redis port's writes), completed on a queue of their own that never
// polls, by one thread.
//
// Why not the callback client API (stub->async()): its completions come
// through gRPC's process-wide callback queue, whose threads poll for I/O as
// they wait, and would take the poller's role from the server's call queues
// on every call, putting thread hand-offs back on the whole server's request
// path (server/service/call_queues.h). An in-process call needs no polling at all.
//
// Thread safety: Start may be called from any thread; `done` runs on the
// queue's thread. The destructor waits for nothing: the owner must wait for
// its calls to finish first.
#ifndef CUCKOO_SERVER_SERVICE_IN_PROCESS_CALLS_H_
#define CUCKOO_SERVER_SERVICE_IN_PROCESS_CALLS_H_

#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_unary_call.h>
#include <pthread.h>

#include <functional>
#include <memory>
#include <thread>
#include <utility>

namespace cuckoo::server {

class InProcessCalls {
 public:
  InProcessCalls() : thread_([this] { Run(); }) {}
  ~InProcessCalls() {
    queue_.Shutdown();
    thread_.join();
  }
  InProcessCalls(const InProcessCalls&) = delete;
  InProcessCalls& operator=(const InProcessCalls&) = delete;

  // Starts the call prepare(queue) returns (a stub's PrepareAsync<Method>)
  // and runs done(status) once it completed, with its response in *response.
  template <typename Response, typename Prepare>
  void Start(Prepare prepare, Response* response, std::function<void(grpc::Status)> done) {
    auto* pending = new Pending<Response>;
    pending->done = std::move(done);
    pending->reader = prepare(&queue_);
    pending->reader->StartCall();
    pending->reader->Finish(response, &pending->status, pending);
  }

 private:
  struct Completion {
    virtual ~Completion() = default;
    grpc::Status status;
    std::function<void(grpc::Status)> done;
  };
  template <typename Response>
  struct Pending final : Completion {
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  };
  // A queue that waits on a condition variable, never in poll().
  class NonPollingQueue final : public grpc::CompletionQueue {
   public:
    NonPollingQueue()
        : grpc::CompletionQueue(grpc_completion_queue_attributes{
              GRPC_CQ_CURRENT_VERSION, GRPC_CQ_NEXT, GRPC_CQ_NON_POLLING, nullptr}) {}
  };

  void Run() {
    pthread_setname_np(pthread_self(), "in-process-rpc");
    void* tag;
    bool ok;
    while (queue_.Next(&tag, &ok)) {
      std::unique_ptr<Completion> c(static_cast<Completion*>(tag));
      c->done(std::move(c->status));
    }
  }

  NonPollingQueue queue_;
  std::thread thread_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_IN_PROCESS_CALLS_H_
