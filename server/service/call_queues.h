// CallQueues: the completion queues that serve every call of cuckood's gRPC
// services on gRPC's asynchronous API, each polled by one thread of its own.
//
// Why (docs/SERVER_DESIGN.md, "Threads of the request path"): with gRPC
// 1.51's callback API a call passes through several threads (the callback
// queue's two "nexting" threads hand the poller's role to each other and
// to the executor), about 3-4 context switches per unary call. A thread
// that polls its own queue reads a call, runs the handler inline and sends
// the answer itself: one switch per call when one thread serves, and no
// callback method may be registered at all, because the callback queue's
// threads would join the polling and take the role back. So every service
// of cuckood (FilterService, grpc.health.v1.Health) is asynchronous.
//
// Use: each call object derives from Call (or, for other state machines,
// Op) and gives gRPC a Tag for each operation; the queue's thread calls
// op->Proceed(event, ok) for each completion. Methods are registered with
// AddMethod before Start: Start posts `posted` calls of each method on each
// queue, and a call that starts posts its successor (Post) on the same
// queue, so a queue always waits with `posted` calls of each method.
//
// Every call object counts itself: Post counts it when the poster makes it,
// and the object calls Release just before it deletes itself (Call does
// both of these).
//
// Order: AddQueues before grpc::ServerBuilder::BuildAndStart; Start once the
// server runs; Stop once grpc::Server::Shutdown has returned: it stops
// posting, waits (the threads still serving) until every call object is
// gone, since after Server::Shutdown each posted request comes back and
// each matched call is cancelled, and only then shuts the queues down (no
// operation may start on a queue that is shut down: an answer sent then
// aborts the process) and joins the threads. The destructor stops if
// nobody did. Thread safety: Post and Release may be called from any
// thread; Post does nothing once Stop has begun.
#ifndef CUCKOO_SERVER_SERVICE_CALL_QUEUES_H_
#define CUCKOO_SERVER_SERVICE_CALL_QUEUES_H_

#include <grpcpp/completion_queue.h>
#include <grpcpp/server_builder.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace cuckoo::server {

class CallQueues {
 public:
  // One call's state machine. Events are the call's own numbering.
  class Op {
   public:
    virtual void Proceed(int event, bool ok) = 0;

   protected:
    ~Op() = default;
  };
  // What each operation of a call hands gRPC as its tag.
  struct Tag {
    Op* op;
    int event;
  };
  class Call;
  // Posts one call of method number `method` on queue `cq` (index `queue`).
  using Poster = std::function<void(grpc::ServerCompletionQueue* cq, size_t queue, int method)>;

  CallQueues() = default;
  CallQueues(const CallQueues&) = delete;
  CallQueues& operator=(const CallQueues&) = delete;
  ~CallQueues() { Stop(); }

  // Adds `n` (at least 1) queues to `builder`.
  void AddQueues(grpc::ServerBuilder* builder, int n);
  // Registers a method: `posted` calls of it wait on each queue. Returns
  // the method's number for Post.
  int AddMethod(Poster poster, int posted);
  void Start();
  void Stop();

  // Posts one more call of method `method` on queue `queue`, unless Stop
  // has begun.
  void Post(int method, size_t queue);
  // A call object made by a poster is about to delete itself.
  void Release() { live_.fetch_sub(1, std::memory_order_acq_rel); }

  size_t size() const { return queues_.size(); }

 private:
  struct Queue {
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    std::thread thread;
    Mutex mu;
    // False until Start and once Stop began: nothing is posted (a call
    // posted on a queue that is shut down would be an error).
    bool open ABSL_GUARDED_BY(mu) = false;
  };
  struct Method {
    Poster poster;
    int posted;
  };
  static void Drain(grpc::ServerCompletionQueue* cq);

  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<Method> methods_;
  // Call objects made and not yet released.
  std::atomic<int64_t> live_{0};
  bool stopped_ = false;
};

// The life every call of cuckood's services shares, on one queue's thread:
// made by its method's poster (counted), matched with an incoming call
// (start tag: it posts its successor, then OnStarted), its own operations
// (OnEvent, with the subclass's event numbers, 0 and up), and deleted once
// gRPC has delivered both its finish tag (or the subclass said Finished)
// and its done tag: OnEnded first, then Release. A start tag that comes
// back not ok (the server is shutting down: no call came) deletes it at
// once, without OnEnded.
//
// The subclass hands gRPC start_tag() when it requests the call,
// done_tag() to ServerContext::AsyncNotifyWhenDone before that, and
// finish_tag() to its Finish. Every hook runs on the call's queue's
// thread, which is the only one, so the hooks need no lock of their own
// against each other.
class CallQueues::Call : public CallQueues::Op {
 public:
  void Proceed(int event, bool ok) final {
    switch (event) {
      case kStart:
        if (!ok) return Delete();
        queues_->Post(method_, queue_);
        OnStarted();
        break;
      case kFinish:
        finished_ = true;
        break;
      case kDone:
        done_ = true;
        OnDone();
        break;
      default:
        OnEvent(event, ok);
        break;
    }
    if (finished_ && done_) {
      OnEnded();
      Delete();
    }
  }

 protected:
  Call(CallQueues* queues, int method, size_t queue)
      : queues_(queues), method_(method), queue_(queue) {}
  virtual ~Call() = default;

  // Matched with an incoming call.
  virtual void OnStarted() = 0;
  // A completion of one of the subclass's own operations.
  virtual void OnEvent(int event, bool ok) {
    (void)event;
    (void)ok;
  }
  // The done tag came (ServerContext::IsCancelled may be asked now).
  virtual void OnDone() {}
  // Both tags came: the call is about to be deleted.
  virtual void OnEnded() {}
  // For a call that never sends Finish (a stream the server ends only when
  // the client goes): it is done with gRPC from the next completion on.
  void Finished() { finished_ = true; }

  Tag* start_tag() { return &start_tag_; }
  Tag* finish_tag() { return &finish_tag_; }
  Tag* done_tag() { return &done_tag_; }

 private:
  enum BaseEvent { kStart = -1, kFinish = -2, kDone = -3 };
  void Delete() {
    CallQueues* const queues = queues_;
    delete this;
    queues->Release();
  }

  CallQueues* const queues_;
  const int method_;
  const size_t queue_;
  Tag start_tag_{this, kStart};
  Tag finish_tag_{this, kFinish};
  Tag done_tag_{this, kDone};
  bool finished_ = false;
  bool done_ = false;
};

// Threads for the queues when --grpc-threads is 0: one per CPU this process
// may run on (its affinity mask, so `taskset -c 0 cuckood` gets one).
int DefaultCallThreads();

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_CALL_QUEUES_H_
