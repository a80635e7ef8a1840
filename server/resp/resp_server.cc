#include "server/resp/resp_server.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/post.hpp"
#include "server/resp/resp_server_internal.h"

namespace cuckoo::server::resp {

namespace {

constexpr std::string_view kMaxClients = "-ERR max number of clients reached\r\n";

}  // namespace

std::string FormatEndpoint(const tcp::endpoint& endpoint) {
  const asio::ip::address address = endpoint.address();
  if (address.is_v6()) return absl::StrCat("[", address.to_string(), "]:", endpoint.port());
  return absl::StrCat(address.to_string(), ":", endpoint.port());
}

absl::Status RespServer::Core::Listen() {
  const std::string& listen = options.listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RESP listen address \"%s\" is not host:port", listen));
  }
  std::string host = listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port_text) > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RESP listen address \"%s\": port \"%s\" is not a number 0..65535", listen, port_text));
  }
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 2 || host.back() != ']') {
      return absl::InvalidArgumentError(
          absl::StrFormat("RESP listen address \"%s\": unbalanced '[' in the host", listen));
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RESP listen address \"%s\": an IPv6 host must be in brackets, e.g. [::1]:6379", listen));
  }
  if (host.empty()) host = "0.0.0.0";
  error_code ec;
  tcp::resolver resolver(workers[0]->io);
  tcp::resolver::results_type endpoints = resolver.resolve(
      host, port_text, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RESP listen address \"%s\": cannot resolve \"%s\": %s", listen, host, ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto fail = [&](std::string_view what) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on RESP address %s: %s: %s", listen, what, ec.message()));
  };
  if (acceptor->open(endpoint.protocol(), ec); ec) return fail("socket");
  if (acceptor->set_option(asio::socket_base::reuse_address(true), ec); ec) {
    return fail("SO_REUSEADDR");
  }
  if (acceptor->bind(endpoint, ec); ec) return fail("bind");
  if (acceptor->listen(options.listen_backlog, ec); ec) return fail("listen");
  const tcp::endpoint bound = acceptor->local_endpoint(ec);
  if (ec) return fail("getsockname");
  port = bound.port();
  address = FormatEndpoint(bound);
  return absl::OkStatus();
}

void RespServer::Core::Run() {
  Accept();
  for (auto& w : workers) {
    w->guard.emplace(w->io.get_executor());
    Sweep(w.get());
    w->thread = std::thread([w = w.get()] {
      w->io.run();
      w->done.store(true);
    });
  }
}

void RespServer::Core::Accept() {
  Worker* const worker = workers[next_worker].get();
  next_worker = (next_worker + 1) % workers.size();
  acceptor->async_accept(worker->io, [this, worker](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly rather than spin.
      retry->expires_after(std::chrono::milliseconds(100));
      retry->async_wait([this](error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    if (options.on_connect) options.on_connect();
    auto refuse = [&](std::string_view error, std::string_view reason) {
      // As Redis: the error, then close. It fits the socket buffer. (Not
      // over TLS: no handshake is made for a connection refused.)
      error_code ignored;
      if (!options.tls_context) {
        socket.non_blocking(true, ignored);
        socket.write_some(asio::buffer(error), ignored);
      }
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      socket.close(ignored);
      if (options.on_close) options.on_close(reason);
    };
    if (connection_count.load() >= options.max_connections) {
      refuse(kMaxClients, "max_clients");
    } else if (options.auth_required &&
               static_cast<int64_t>(unauthenticated_count.load()) -
                       static_cast<int64_t>(displacing_count.load()) >=
                   static_cast<int64_t>(options.max_unauthenticated) &&
               !DisplaceOldestUnauthenticated()) {
      // Those not authenticated are all accepted and not started yet.
      refuse(kMaxUnauthenticated, "max_unauthenticated");
    } else {
      connection_count.fetch_add(1);
      if (options.auth_required) unauthenticated_count.fetch_add(1);
      auto connection = std::make_shared<internal::Connection>(
          shared_from_this(), worker, std::move(socket), options.auth_required,
          options.tls_context ? options.tls_context() : nullptr);
      asio::post(worker->io, [connection] { connection->Start(); });
    }
    Accept();
  });
}

void RespServer::Core::Sweep(Worker* worker) {
  absl::Duration interval = absl::Milliseconds(250);
  if (options.idle_timeout > absl::ZeroDuration()) {
    interval = std::min(interval, options.idle_timeout / 10);
  }
  for (absl::Duration timeout :
       {options.write_stall_timeout, options.output_soft_timeout, options.auth_timeout}) {
    if (timeout > absl::ZeroDuration()) interval = std::min(interval, timeout / 10);
  }
  interval = std::max(interval, absl::Milliseconds(10));
  worker->sweep.expires_after(absl::ToChronoNanoseconds(interval));
  worker->sweep.async_wait([this, worker](error_code ec) {
    if (ec || stopped.load()) return;
    const Clock::time_point now = Clock::now();
    for (auto it = worker->connections.begin(); it != worker->connections.end();) {
      std::shared_ptr<internal::Connection> c = *it++;  // Sweep may erase it from the list
      c->Sweep(now);
    }
    if (options.client_memory > 0) Evict();  // in case a trigger was missed
    Sweep(worker);
  });
}

void RespServer::Core::CloseAll(Worker* worker, bool force) {
  for (auto it = worker->connections.begin(); it != worker->connections.end();) {
    std::shared_ptr<internal::Connection> c = *it++;
    c->CloseForShutdown(force);
  }
}

void RespServer::Core::Shutdown(absl::Duration drain) {
  std::call_once(shutdown_once, [&] { DoShutdown(drain); });
}

void RespServer::Core::DoShutdown(absl::Duration drain) {
  auto wait_until = [](Clock::time_point deadline, auto done) {
    while (!done() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // New commands get the shutting-down error; no new connections.
  shutting_down.store(true);
  asio::post(workers[0]->io, [this] {
    error_code ignored;
    acceptor->close(ignored);
    retry->cancel();
    acceptor_closed.store(true);
  });
  wait_until(Clock::now() + std::chrono::seconds(1), [&] { return acceptor_closed.load(); });
  // Commands in flight complete and are answered.
  wait_until(Clock::now() + absl::ToChronoNanoseconds(std::max(drain, absl::ZeroDuration())),
             [&] { return in_flight.load() <= 0; });
  // Every connection flushes and closes.
  closing_all.store(true);
  for (auto& w : workers) asio::post(w->io, [this, w = w.get()] { CloseAll(w, false); });
  wait_until(Clock::now() + kCloseFlushTime + std::chrono::milliseconds(200),
             [&] { return connection_count.load() == 0; });
  // No more posts from late replies; what is left closes now; the threads
  // return once their io_contexts have nothing left to do.
  stopped.store(true);
  while (posting.load() > 0) std::this_thread::yield();
  for (auto& w : workers) {
    asio::post(w->io, [this, w = w.get()] {
      CloseAll(w, true);
      w->sweep.cancel();
    });
    w->guard.reset();
  }
  wait_until(Clock::now() + std::chrono::seconds(2), [&] {
    return std::all_of(workers.begin(), workers.end(), [](auto& w) { return w->done.load(); });
  });
  for (auto& w : workers) {
    w->io.stop();  // (a no-op unless something still had work after 2 s)
    if (w->thread.joinable()) w->thread.join();
  }
  // Connections still referenced here only (the cycle through Core).
  for (auto& w : workers) w->connections.clear();
}

RespServer::RespServer(std::shared_ptr<Core> core) : core_(std::move(core)) {}

RespServer::~RespServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<RespServer>> RespServer::Start(const ServerOptions& options,
                                                              CommandHandler* handler) {
  auto core = std::make_shared<Core>(options, handler);
  if (absl::Status s = core->Listen(); !s.ok()) return s;
  core->Run();
  return std::unique_ptr<RespServer>(new RespServer(std::move(core)));
}

std::string RespServer::address() const { return core_->address; }
int RespServer::port() const { return core_->port; }
size_t RespServer::connections() const { return core_->connection_count.load(); }
size_t RespServer::commands_in_flight() const {
  return static_cast<size_t>(std::max<int64_t>(0, core_->in_flight.load()));
}
size_t RespServer::client_memory() const {
  return static_cast<size_t>(std::max<int64_t>(0, core_->client_bytes.load()));
}
uint64_t RespServer::evicted_clients() const { return core_->evicted.load(); }
size_t RespServer::unauthenticated_connections() const {
  return core_->unauthenticated_count.load();
}
void RespServer::Shutdown(absl::Duration drain) { core_->Shutdown(drain); }

void RespServer::Core::ForEachWorker(std::function<void(Worker*)> each,
                                     std::function<void()> done) {
  struct State {
    std::function<void(Worker*)> each;
    std::function<void()> done;
    std::atomic<size_t> left;
  };
  auto state = std::make_shared<State>();
  state->each = std::move(each);
  state->done = std::move(done);
  state->left.store(workers.size());
  for (auto& w : workers) {
    asio::post(w->io, [state, w = w.get()] {
      state->each(w);
      if (state->left.fetch_sub(1) == 1) state->done();
    });
  }
}

void RespServer::ListClients(std::function<void(std::vector<ClientInfo>)> done) {
  struct State {
    std::mutex mu;
    std::vector<ClientInfo> clients;
  };
  auto state = std::make_shared<State>();
  core_->ForEachWorker(
      [state](Core::Worker* w) {
        const Clock::time_point now = Clock::now();
        std::vector<ClientInfo> mine;
        for (const std::shared_ptr<internal::Connection>& c : w->connections) {
          ClientInfo info;
          if (c->Describe(now, &info)) mine.push_back(std::move(info));
        }
        std::lock_guard<std::mutex> lock(state->mu);
        for (ClientInfo& info : mine) state->clients.push_back(std::move(info));
      },
      [state, done = std::move(done)] {
        std::sort(state->clients.begin(), state->clients.end(),
                  [](const ClientInfo& a, const ClientInfo& b) { return a.id < b.id; });
        done(std::move(state->clients));
      });
}

void RespServer::KillClients(ClientFilter filter, std::function<void(size_t)> done) {
  auto killed = std::make_shared<std::atomic<size_t>>(0);
  core_->ForEachWorker(
      [killed, filter = std::move(filter)](Core::Worker* w) {
        const Clock::time_point now = Clock::now();
        for (auto it = w->connections.begin(); it != w->connections.end();) {
          const std::shared_ptr<internal::Connection> c = *it++;  // (Kill may erase it)
          if (c->Kill(filter, now)) killed->fetch_add(1);
        }
      },
      [killed, done = std::move(done)] { done(killed->load()); });
}

}  // namespace cuckoo::server::resp
