// Helpers for process-level end-to-end tests: run the real binaries
// (cuckood, cuckooctl, /usr/bin/python3), feed them input, collect output and
// exit status, and send signals.
//
// Paths come from compile definitions set in tests/e2e/CMakeLists.txt:
//   CUCKOOD_PATH, CUCKOOCTL_PATH, PYTHON_PACKAGE_DIR (the generated Python
//   package's parent directory), SOURCE_DIR (the repository root).
#ifndef CUCKOO_TESTS_E2E_PROCESS_H_
#define CUCKOO_TESTS_E2E_PROCESS_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/util/loopback.h"
#include "tests/util/test_server.h"

extern char** environ;

namespace cuckoo::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// A child process with stdin from a file (or /dev/null) and stdout and
// stderr captured into files of a private temp dir.
class Process {
 public:
  // Starts argv[0] (a path) with `argv`, adding `env` ("NAME=value") to this
  // process's environment. `stdin_data` is written to a file the child reads.
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
          const std::string& stdin_data = "") {
    const std::string in = dir_.path() + "/stdin";
    WriteFile(in, stdin_data);
    out_ = dir_.path() + "/stdout";
    err_ = dir_.path() + "/stderr";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, in.c_str(), O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // `env` first; inherited variables only where `env` does not set them
    // (with duplicates, glibc's getenv returns the first).
    std::vector<std::string> envs = env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view var(*e);
      const std::string_view name = var.substr(0, var.find('='));
      bool overridden = false;
      for (const std::string& mine : env) {
        overridden |= std::string_view(mine).substr(0, mine.find('=')) == name;
      }
      if (!overridden) envs.push_back(*e);
    }
    std::vector<char*> cargv, cenv;
    std::vector<std::string> args = argv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : envs) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) pid_ = -1;
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Not after the exit was seen: the pid may belong to another process by
  // then.
  void Signal(int signo) {
    if (pid_ > 0 && !exited_) kill(pid_, signo);
  }

  // Waits up to `timeout` for the exit. Returns the exit code, 128 + signal
  // if killed by one, or -1 on timeout (the child keeps running).
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    if (exited_) return code_;
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return code_;
      }
      if (std::chrono::steady_clock::now() >= until) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::string out() const { return ReadFile(out_); }
  std::string err() const { return ReadFile(err_); }

 private:
  TempDir dir_;
  std::string out_, err_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

// Runs a command to completion.
struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

inline Result RunProcess(const std::vector<std::string>& argv, const std::string& stdin_data = "",
                         const std::vector<std::string>& env = {}) {
  Process p(argv, env, stdin_data);
  Result r;
  r.code = p.Wait();
  r.out = p.out();
  r.err = p.err();
  return r;
}

// A real cuckood on a free loopback port, started and waited for (its
// "serving on" log line), killed on destruction if still running. Its admin
// HTTP server is on a port of its own choosing (--admin-listen=127.0.0.1:0,
// read back from the "admin HTTP on" log line) unless `flags` set
// --admin-listen.
class Cuckood {
 public:
  explicit Cuckood(const std::string& data_dir, std::vector<std::string> flags = {}) {
    // The free port can be taken between FreePort and the server's bind
    // (by another test's process, or as the local port of an outgoing
    // connection): then again on another port.
    for (int attempt = 0; attempt < 5; ++attempt) {
      Start(data_dir, flags);
      if (ready_ || process_->Wait(std::chrono::milliseconds(0)) == -1) return;
      const std::string in_use = "cannot listen on " + address_ + ": the address is in use";
      if (process_->out().find(in_use) == std::string::npos &&
          process_->err().find(in_use) == std::string::npos) {
        return;
      }
    }
  }

  bool ready() const { return ready_; }
  const std::string& address() const { return address_; }
  // The admin HTTP server's host:port and port ("" and 0 if it has none).
  const std::string& admin_address() const { return admin_address_; }
  int admin_port() const { return admin_port_; }
  Process& process() { return *process_; }

 private:
  void Start(const std::string& data_dir, const std::vector<std::string>& flags) {
    port_ = FreePort();
    address_ = "127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> argv = {CUCKOOD_PATH, "--listen=" + address_,
                                     "--data-dir=" + data_dir};
    bool admin_set = false;
    for (const std::string& f : flags) admin_set |= f.starts_with("--admin-listen");
    if (!admin_set) argv.push_back("--admin-listen=127.0.0.1:0");
    argv.insert(argv.end(), flags.begin(), flags.end());
    process_ = std::make_unique<Process>(argv);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      const std::string out = process_->out();
      if (out.find("serving on") != std::string::npos) {
        ready_ = true;
        constexpr std::string_view kAdmin = "admin HTTP on ";
        if (size_t at = out.find(kAdmin); at != std::string::npos) {
          at += kAdmin.size();
          admin_address_ = out.substr(at, out.find_first_of(" \n\"", at) - at);
          admin_port_ = std::atoi(admin_address_.c_str() + admin_address_.rfind(':') + 1);
        }
        break;
      }
      if (process_->Wait(std::chrono::milliseconds(20)) != -1) break;  // Exited.
    }
  }

  int port_ = 0;
  std::string address_;
  std::string admin_address_;
  int admin_port_ = 0;
  std::unique_ptr<Process> process_;
  bool ready_ = false;
};

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_E2E_PROCESS_H_
