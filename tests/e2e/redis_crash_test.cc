// Durability through the Redis port, on the real process: writers send
// pipelined CF.ADD, CF.ADDNX and CF.INSERT over plain sockets and record
// every item the server acknowledged (":1", or 1 in CF.INSERT's array);
// cuckood is killed with SIGKILL at a random moment, restarted on the same
// data directory, and every item ever acknowledged must be present
// (CF.MEXISTS). Five rounds, with snapshots and log rotation going on.
// A RESP write is applied at once and answered only once durable, while the
// connection runs the writes after it (server/resp/commands/resp_commands.h): this checks
// that promise holds when RESP replies are batched and pipelined, runs of
// CF.ADD merged, and separate writes of one connection (CF.INSERTs, CF.ADDs
// alternating between filters) share group commits.
//
// CTest label "chaos": runs in the release build only (tests/e2e/CMakeLists.txt).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "core/snapshot.h"
#include "tests/e2e/redis_test_util.h"

namespace cuckoo::testing {
namespace {

TEST(RedisCrashTest, KillDashNineLosesNoAcknowledgedRespWrite) {
  TempDir data;
  const std::vector<std::string> flags = {"--wal-segment-size=256KiB", "--wal-max-size=1MiB",
                                          "--snapshot-interval=1s", "--redis-error-rate=1e-6"};
  std::mt19937 rng(2017);
  std::mutex mu;
  // Acknowledged items per filter, across rounds.
  std::vector<std::string> acked_add, acked_insert;
  uint64_t unanswered = 0;
  // CF.ADDNX answers 0 for an item the filter may hold: a false positive
  // (about 1e-6 a lookup here, so a few in a run at most), which adds
  // nothing and acknowledges nothing.
  uint64_t addnx_present = 0;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    auto server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    if (round == 0) {
      RespConn c(server->redis_port());
      std::optional<RespReply> r = c.Call({"CF.RESERVE", "adds", "8000000"});
      ASSERT_TRUE(r.has_value());
      ASSERT_EQ(r->str, "OK");
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    for (int w = 0; w < 3; ++w) {
      writers.emplace_back([&, w, port = server->redis_port()] {
        RespConn c(port, std::chrono::seconds(10));
        if (!c.ok()) return;
        for (uint64_t batch = 0; !stop.load(); ++batch) {
          // Pipelined: 200 single-item writes (writer 0: one run of CF.ADD,
          // merged into one batch; writer 1: CF.ADD alternating between the
          // two filters, each its own write; writer 2: CF.ADDNX), then four
          // 50-item CF.INSERTs.
          const std::string tag = "r" + std::to_string(round) + "-w" + std::to_string(w) + "-" +
                                  std::to_string(batch) + "-";
          std::string pipeline;
          struct Sent {
            bool many;  // CF.INSERT
            std::vector<std::string>* acked;
            std::vector<std::string> items;
          };
          std::vector<Sent> sent;
          for (int i = 0; i < 200; ++i) {
            const bool other = w == 1 && i % 2 == 1;
            sent.push_back({false, other ? &acked_insert : &acked_add, {tag + std::to_string(i)}});
            pipeline += RespConn::Encode(
                {w == 2 ? "CF.ADDNX" : "CF.ADD", other ? "inserts" : "adds", sent.back().items[0]});
          }
          for (int k = 0; k < 4; ++k) {
            std::vector<std::string> insert = {"CF.INSERT", "inserts", "ITEMS"};
            sent.push_back({true, &acked_insert, {}});
            for (int i = 0; i < 50; ++i) {
              sent.back().items.push_back(tag + "i" + std::to_string(k) + "-" + std::to_string(i));
              insert.push_back(sent.back().items.back());
            }
            pipeline += RespConn::Encode(insert);
          }
          if (!c.Send(pipeline)) return;
          for (const Sent& command : sent) {
            std::optional<RespReply> r = c.Read();
            if (!r) {  // Killed: this and the rest are unknown.
              std::lock_guard<std::mutex> lock(mu);
              ++unanswered;
              return;
            }
            std::lock_guard<std::mutex> lock(mu);
            if (!command.many) {
              if (r->type == ':' && r->integer == 1) {
                command.acked->push_back(command.items[0]);
              } else if (w == 2 && r->type == ':' && r->integer == 0) {
                ++addnx_present;
              } else {
                ADD_FAILURE() << "CF.ADD " << command.items[0] << ": " << r->type << r->str;
              }
              continue;
            }
            if (r->type != '*' || r->elems.size() != command.items.size()) {
              ADD_FAILURE() << "CF.INSERT: " << r->type << r->str;
              continue;
            }
            for (size_t i = 0; i < command.items.size(); ++i) {
              if (r->elems[i].integer == 1) command.acked->push_back(command.items[i]);
            }
          }
        }
      });
    }
    // Kill at a random moment after this round's writers have had some
    // writes acknowledged: a fixed delay gave a loaded machine too few
    // acknowledgements, and the load floor below failed with nothing lost.
    // The random part is short: a fast disk lets cuckood acknowledge about
    // 700 000 CF.ADD a second, and five rounds must fit in "adds".
    size_t add_before, insert_before;
    {
      std::lock_guard<std::mutex> lock(mu);
      add_before = acked_add.size();
      insert_before = acked_insert.size();
    }
    for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
         std::chrono::steady_clock::now() < deadline;
         std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
      std::lock_guard<std::mutex> lock(mu);
      if (acked_add.size() - add_before > 2'000 && acked_insert.size() - insert_before > 200) break;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    server->process().Signal(SIGKILL);
    ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : writers) t.join();

    server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    RespConn c(server->redis_port(), std::chrono::seconds(30));
    uint64_t missing = 0;
    for (const auto& [filter, items] :
         {std::pair{"adds", &acked_add}, std::pair{"inserts", &acked_insert}}) {
      for (size_t i = 0; i < items->size(); i += 5000) {
        std::vector<std::string> args = {"CF.MEXISTS", filter};
        args.insert(args.end(), items->begin() + i,
                    items->begin() + std::min(items->size(), i + 5000));
        std::optional<RespReply> r = c.Call(args);
        ASSERT_TRUE(r.has_value());
        ASSERT_EQ(r->type, '*') << r->str;
        ASSERT_EQ(r->elems.size(), args.size() - 2);
        for (size_t j = 0; j < r->elems.size(); ++j) {
          if (r->elems[j].integer != 1 && ++missing <= 10) {
            ADD_FAILURE() << "acknowledged " << args[j + 2] << " missing from " << filter;
          }
        }
      }
    }
    EXPECT_EQ(missing, 0u);
    std::cout << "round " << round << ": " << acked_add.size() << " CF.ADD and "
              << acked_insert.size() << " CF.INSERT items acknowledged, all present; " << unanswered
              << " pipelines cut off by the kills so far\n";
    server->process().Signal(SIGKILL);
    server->process().Wait();
  }
  // Each round waited (up to a minute) for more than 2 000 and 200 of them.
  EXPECT_GT(acked_add.size(), 10'000u) << "the load was too light";
  EXPECT_GT(acked_insert.size(), 1'000u) << "the load was too light";
  // More than a handful would be a filter answering "present" for new
  // items, not chance.
  EXPECT_LE(addnx_present, 10u) << "CF.ADDNX answered 0 for new items";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Filter expiry around kill -9: filters made with short TTLs (100-500 ms;
// some of 20-40 s) while items are written into them (CF.INSERT NOCREATE)
// and into a filter without expiry, cuckood killed at random moments (so
// around expiry moments and their drops). After each restart: every filter
// whose time has passed is missing at once (or, when the kill cut its
// PEXPIREAT before it was applied, there without an expiry), and its drop is
// logged promptly
// (its snapshot file gone within a second: the timer's logged drop, or the
// replay of one logged before the kill); every filter whose time has not
// passed has the expiry that was acknowledged (PEXPIREAT is all or
// nothing: an unanswered one left the old value or the new one) and every
// item acknowledged into it; the filter without expiry every item.
TEST(RedisCrashTest, KillDashNineAroundExpiryMomentsKeepsDropsAndAcknowledgedItems) {
  TempDir data;
  const std::vector<std::string> flags = {"--wal-segment-size=256KiB", "--snapshot-interval=1s",
                                          "--redis-error-rate=1e-6"};
  std::mt19937 rng(29);
  struct Expiring {
    std::string name;
    int64_t at = 0;
    bool acked = false;  // Its PEXPIREAT was answered :1.
    std::vector<std::string> items;
  };
  std::vector<Expiring> filters;
  std::vector<std::string> kept;
  size_t expired_checked = 0, live_checked = 0;
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    auto server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::thread writer([&, port = server->redis_port(), seed = rng()] {
      std::mt19937 r(seed);
      RespConn c(port, std::chrono::seconds(10));
      for (int i = 0; !stop.load() && c.ok(); ++i) {
        Expiring e;
        e.name = "e-" + std::to_string(round) + "-" + std::to_string(i);
        std::optional<RespReply> made = c.Call({"CF.RESERVE", e.name, "1000"});
        if (!made) return;
        if (made->str != "OK") {
          ADD_FAILURE() << e.name << ": " << made->str;
          return;
        }
        const bool long_ttl = r() % 10 < 3;
        e.at = NowMs() + (long_ttl ? std::uniform_int_distribution<int>(20'000, 40'000)(r)
                                   : std::uniform_int_distribution<int>(100, 500)(r));
        {
          std::lock_guard<std::mutex> lock(mu);
          filters.push_back(e);
        }
        std::optional<RespReply> set = c.Call({"PEXPIREAT", e.name, std::to_string(e.at)});
        if (!set) return;
        if (set->type != ':' || set->integer != 1) {
          ADD_FAILURE() << e.name << " PEXPIREAT: " << set->type << set->str;
          return;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          filters.back().acked = true;
        }
        for (int k = 0; k < 8 && !stop.load(); ++k) {
          std::vector<std::string> insert = {"CF.INSERT", e.name, "NOCREATE", "ITEMS"};
          std::vector<std::string> items;
          for (int j = 0; j < 10; ++j) items.push_back(e.name + "/" + std::to_string(k * 10 + j));
          insert.insert(insert.end(), items.begin(), items.end());
          std::optional<RespReply> ins = c.Call(insert);
          std::optional<RespReply> keep =
              c.Call({"CF.ADD", "kept", e.name + "/k" + std::to_string(k)});
          if (!ins || !keep) return;
          std::lock_guard<std::mutex> lock(mu);
          if (ins->type == '*') {
            for (size_t j = 0; j < items.size(); ++j) {
              if (ins->elems[j].integer == 1) filters.back().items.push_back(items[j]);
            }
          } else if (ins->str.find("not found") == std::string::npos || NowMs() < e.at) {
            ADD_FAILURE() << e.name << " CF.INSERT: " << ins->str;
          }
          if (keep->type == ':' && keep->integer == 1)
            kept.push_back(e.name + "/k" + std::to_string(k));
        }
      }
    });
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(600, 1500)(rng)));
    server->process().Signal(SIGKILL);
    ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
    stop = true;
    writer.join();

    server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    RespConn c(server->redis_port(), std::chrono::seconds(30));
    std::vector<std::string> gone;
    for (const Expiring& e : filters) {
      const int64_t before = NowMs();
      std::optional<RespReply> exists = c.Call({"EXISTS", e.name});
      ASSERT_TRUE(exists.has_value());
      if (e.at <= before) {
        if (!e.acked && exists->integer == 1) {
          // The kill cut its PEXPIREAT before it was applied: no expiry
          // (the old value), so it stays.
          std::optional<RespReply> t = c.Call({"PEXPIRETIME", e.name});
          ASSERT_TRUE(t.has_value());
          EXPECT_EQ(t->integer, -1) << e.name << " holds an expiry it was never given";
          continue;
        }
        // Past its time: missing, whatever the log holds.
        EXPECT_EQ(exists->integer, 0) << e.name;
        gone.push_back(e.name);
        ++expired_checked;
        continue;
      }
      if (e.at < NowMs() + 5'000) continue;  // Could pass while checked.
      if (!e.acked) {
        // Cut by the kill: the old expiry (none) or the new one, whole.
        if (exists->integer == 1) {
          std::optional<RespReply> t = c.Call({"PEXPIRETIME", e.name});
          ASSERT_TRUE(t.has_value());
          EXPECT_TRUE(t->integer == -1 || t->integer == e.at) << e.name << " " << t->integer;
        }
        continue;
      }
      ASSERT_EQ(exists->integer, 1) << e.name << " expires at " << e.at;
      std::optional<RespReply> t = c.Call({"PEXPIRETIME", e.name});
      ASSERT_TRUE(t.has_value());
      EXPECT_EQ(t->integer, e.at) << e.name;
      ++live_checked;
      if (e.items.empty()) continue;
      std::vector<std::string> args = {"CF.MEXISTS", e.name};
      args.insert(args.end(), e.items.begin(), e.items.end());
      std::optional<RespReply> r = c.Call(args);
      ASSERT_TRUE(r.has_value());
      ASSERT_EQ(r->elems.size(), e.items.size()) << r->str;
      for (size_t j = 0; j < e.items.size(); ++j) {
        EXPECT_EQ(r->elems[j].integer, 1) << "acknowledged " << e.items[j] << " missing";
      }
    }
    if (!kept.empty()) {
      std::vector<std::string> args = {"CF.MEXISTS", "kept"};
      args.insert(args.end(), kept.begin(), kept.end());
      std::optional<RespReply> r = c.Call(args);
      ASSERT_TRUE(r.has_value());
      ASSERT_EQ(r->elems.size(), kept.size()) << r->str;
      for (size_t j = 0; j < kept.size(); ++j) {
        EXPECT_EQ(r->elems[j].integer, 1) << "acknowledged " << kept[j] << " missing from kept";
      }
    }
    // Each expired filter's drop is logged promptly after start (or was
    // before the kill): its snapshot file goes.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (const std::string& name : gone) {
      const std::string file = SnapshotPath(data.path(), name);
      while (std::filesystem::exists(file) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      EXPECT_FALSE(std::filesystem::exists(file)) << name << " expired, its file is still there";
    }
    std::cout << "round " << round << ": " << filters.size() << " expiring filters, "
              << expired_checked << " expired ones missing, " << live_checked
              << " live ones with their expiry and items; " << kept.size()
              << " items of the filter without expiry present\n";
    server->process().Signal(SIGKILL);
    server->process().Wait();
  }
  EXPECT_GT(expired_checked, 20u) << "the load was too light";
  EXPECT_GT(live_checked, 3u) << "the load was too light";
}

// RENAME back and forth between two names, each time over a filter made to
// be replaced, while another connection writes: killed at a random moment
// in each of eight rounds. After each restart exactly one of the names holds
// the rotated filter (the one with its marker item), every item it
// acknowledged is in it, an acknowledged RENAME is there whole (the old
// name gone, the replaced filter gone), and one the kill left unanswered is
// there whole or not at all (then the replaced filter is still there, with
// its own marker). The rounds run with snapshots every second and a small
// log, so renames cross snapshots, file moves and truncations.
TEST(RedisCrashTest, KillDashNineLeavesEveryRenameWholeOrAbsent) {
  TempDir data;
  const std::vector<std::string> flags = {"--wal-segment-size=256KiB", "--wal-max-size=1MiB",
                                          "--snapshot-interval=1s", "--redis-error-rate=1e-7"};
  std::mt19937 rng(33);
  std::string cur = "seen:a", other = "seen:b";
  std::vector<std::string> acked_p, acked_steady;
  std::mutex mu;
  std::atomic<uint64_t> renames{0};
  uint64_t in_doubt_applied = 0, in_doubt_not = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE(round);
    auto server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    {
      RespConn c(server->redis_port());
      if (round == 0) {
        // Small enough that a rename's file write is short: the kills then
        // land in every step of the loop, not mostly inside RENAME.
        ASSERT_EQ(c.Call({"CF.RESERVE", cur, "200000"})->str, "OK");
        ASSERT_EQ(c.Call({"CF.ADD", cur, "P-marker"})->integer, 1);
        ASSERT_EQ(c.Call({"CF.RESERVE", "steady", "2000000"})->str, "OK");
      }
      // The replaced filter of an unanswered rename that did not happen.
      ASSERT_TRUE(c.Call({"DEL", other}).has_value());
    }
    std::atomic<bool> stop{false};
    // What the rename loop was doing when the kill came (its reply lost).
    enum Step { kNone, kAdd, kReserve, kDecoy, kRename } in_doubt = kNone;
    bool decoy_acked = false;
    std::thread renamer([&, port = server->redis_port()] {
      RespConn c(port, std::chrono::seconds(10));
      for (uint64_t i = 0; !stop.load(); ++i) {
        const std::string tag = "r" + std::to_string(round) + "-" + std::to_string(i) + "-";
        std::vector<std::string> insert = {"CF.INSERT", cur, "ITEMS"};
        for (int k = 0; k < 20; ++k) insert.push_back(tag + std::to_string(k));
        in_doubt = kAdd;
        std::optional<RespReply> r = c.Call(insert);
        if (!r) return;
        if (r->type != '*' || r->elems.size() != 20) {
          ADD_FAILURE() << "CF.INSERT " << cur << ": " << r->type << r->str;
          return;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          for (int k = 0; k < 20; ++k) {
            if (r->elems[k].integer == 1) acked_p.push_back(insert[3 + k]);
          }
        }
        in_doubt = kReserve;
        decoy_acked = false;
        r = c.Call({"CF.RESERVE", other, "1000"});
        if (!r) return;
        EXPECT_EQ(r->str, "OK") << r->type << r->str;
        in_doubt = kDecoy;
        r = c.Call({"CF.ADD", other, "decoy-marker"});
        if (!r) return;
        EXPECT_EQ(r->integer, 1) << r->type << r->str;
        decoy_acked = true;
        in_doubt = kRename;
        r = c.Call({"RENAME", cur, other});
        if (!r) return;
        ASSERT_EQ(r->str, "OK") << r->type << r->str;
        std::swap(cur, other);
        ++renames;
        in_doubt = kNone;
        decoy_acked = false;  // Replaced by the rename.
      }
    });
    std::thread writer([&, port = server->redis_port()] {
      RespConn c(port, std::chrono::seconds(10));
      for (uint64_t batch = 0; !stop.load(); ++batch) {
        std::string pipeline;
        std::vector<std::string> items;
        for (int i = 0; i < 100; ++i) {
          items.push_back("s" + std::to_string(round) + "-" + std::to_string(batch) + "-" +
                          std::to_string(i));
          pipeline += RespConn::Encode({"CF.ADD", "steady", items.back()});
        }
        if (!c.Send(pipeline)) return;
        for (const std::string& item : items) {
          std::optional<RespReply> r = c.Read();
          if (!r) return;
          std::lock_guard<std::mutex> lock(mu);
          if (r->type == ':' && r->integer == 1) acked_steady.push_back(item);
        }
      }
    });
    // Some renames first, then a random moment.
    const uint64_t renames_before = renames;
    for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
         std::chrono::steady_clock::now() < deadline && renames < renames_before + 5;
         std::this_thread::sleep_for(std::chrono::milliseconds(5))) {
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
    server->process().Signal(SIGKILL);
    ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
    stop = true;
    renamer.join();
    writer.join();

    server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    RespConn c(server->redis_port(), std::chrono::seconds(30));
    auto holds = [&](const std::string& name, const std::string& item) {
      std::optional<RespReply> r = c.Call({"CF.EXISTS", name, item});
      return r.has_value() && r->type == ':' && r->integer == 1;
    };
    auto exists = [&](const std::string& name) {
      std::optional<RespReply> r = c.Call({"EXISTS", name});
      return r.has_value() && r->integer == 1;
    };
    const char* const killed_during[] = {"nothing", "CF.INSERT", "CF.RESERVE", "CF.ADD", "RENAME"};
    const std::string killed = killed_during[in_doubt];
    const bool at_cur = holds(cur, "P-marker"), at_other = holds(other, "P-marker");
    ASSERT_NE(at_cur, at_other) << "exactly one name holds the rotated filter";
    if (at_other) {
      // Only an unanswered rename may have moved it: whole, with its
      // replaced filter gone and the old name free.
      ASSERT_EQ(in_doubt, kRename) << "the filter moved without a rename";
      EXPECT_FALSE(exists(cur)) << cur << " still exists after the rename";
      std::swap(cur, other);
      ++in_doubt_applied;
    } else {
      if (in_doubt == kRename) ++in_doubt_not;
      // Not renamed: the replaced filter is still there if it was made.
      if (decoy_acked) {
        EXPECT_TRUE(holds(other, "decoy-marker")) << "the filter to be replaced is gone";
      }
    }
    if (exists(other)) {
      EXPECT_FALSE(holds(other, "P-marker"));
    }
    uint64_t missing = 0;
    for (const auto& [filter, items] :
         {std::pair{cur, &acked_p}, std::pair{std::string("steady"), &acked_steady}}) {
      for (size_t i = 0; i < items->size(); i += 5000) {
        std::vector<std::string> args = {"CF.MEXISTS", filter};
        args.insert(args.end(), items->begin() + i,
                    items->begin() + std::min(items->size(), i + 5000));
        std::optional<RespReply> r = c.Call(args);
        ASSERT_TRUE(r.has_value());
        ASSERT_EQ(r->type, '*') << r->str;
        for (size_t j = 0; j < r->elems.size(); ++j) {
          if (r->elems[j].integer != 1 && ++missing <= 10) {
            ADD_FAILURE() << "acknowledged " << args[j + 2] << " missing from " << filter;
          }
        }
      }
    }
    EXPECT_EQ(missing, 0u);
    std::cout << "round " << round << ": " << renames.load()
              << " renames acknowledged, the filter at " << cur << " with " << acked_p.size()
              << " items, " << acked_steady.size()
              << " steady items, all present; unanswered renames applied " << in_doubt_applied
              << ", not applied " << in_doubt_not << "; killed during " << killed << "\n";
    server->process().Signal(SIGKILL);
    server->process().Wait();
  }
  EXPECT_GT(renames.load(), 30u) << "the load was too light";
  const auto took = std::chrono::steady_clock::now() - start;
  std::cout << "took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms\n";
}

// The names in `dir` (none if it does not exist).
std::vector<std::string> NamesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

// Descriptors process `pid` holds on files under `dir` (removed files
// included: their links read "<path> (deleted)").
int OpenFilesUnder(pid_t pid, const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    n += std::filesystem::read_symlink(e.path(), link_ec).string().starts_with(dir + "/");
  }
  return n;
}

// CF.SCANDUMP's copy and CF.LOADCHUNK's upload are files without a name
// (removed from .redis-dump as soon as they are open): a SIGKILL mid-dump
// and mid-load leaves nothing in the data directory, before the restart as
// after it, and the restart has nothing to clean up.
TEST(RedisCrashTest, KillDashNineMidDumpAndLoadLeavesNoFileBehind) {
  TempDir data;
  const std::string dumps_dir = data.path() + "/.redis-dump";
  std::string header, chunk;
  int64_t header_it = 0, chunk_it = 0;
  {
    RedisCuckood server(data.path());
    ASSERT_TRUE(server.ready()) << server.Log();
    RespConn c(server.redis_port(), std::chrono::seconds(30));
    ASSERT_EQ(c.Call({"CF.RESERVE", "src", "1000000"})->str, "OK");
    for (int batch = 0; batch < 20; ++batch) {
      std::vector<std::string> insert = {"CF.INSERT", "src", "ITEMS"};
      for (int i = 0; i < 10'000; ++i) {
        insert.push_back("k" + std::to_string(batch) + "-" + std::to_string(i));
      }
      ASSERT_EQ(c.Call(insert)->type, '*');
    }
    // The dump read to its first data chunk, the load sent that far.
    std::optional<RespReply> r = c.Call({"CF.SCANDUMP", "src", "0"});
    ASSERT_TRUE(r.has_value() && r->type == '*') << (r ? r->str : "no reply");
    header_it = r->elems[0].integer;
    header = r->elems[1].str;
    r = c.Call({"CF.SCANDUMP", "src", std::to_string(header_it)});
    ASSERT_TRUE(r.has_value() && r->type == '*') << (r ? r->str : "no reply");
    chunk_it = r->elems[0].integer;
    chunk = r->elems[1].str;
    ASSERT_EQ(chunk.size(), size_t{1} << 20);
    ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", std::to_string(header_it), header})->str, "OK");
    ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", std::to_string(chunk_it), chunk})->str, "OK");
    // Both files are open, and neither has a name.
    EXPECT_EQ(OpenFilesUnder(server.process().pid(), dumps_dir), 2);
    EXPECT_TRUE(NamesIn(dumps_dir).empty());
    server.process().Signal(SIGKILL);
    ASSERT_EQ(server.process().Wait(), 128 + SIGKILL);
  }
  EXPECT_TRUE(NamesIn(dumps_dir).empty()) << "after the kill";
  RedisCuckood server(data.path());
  ASSERT_TRUE(server.ready()) << server.Log();
  EXPECT_TRUE(NamesIn(dumps_dir).empty()) << "after the restart";
  EXPECT_EQ(server.Log().find("cut short by a stop"), std::string::npos)
      << "the restart found files to remove: " << server.Log();
  RespConn c(server.redis_port(), std::chrono::seconds(30));
  EXPECT_EQ(c.Call({"EXISTS", "copy"})->integer, 0);
  EXPECT_EQ(c.Call({"CF.EXISTS", "src", "k0-0"})->integer, 1);
  // The old iterators are of no dump or load now.
  EXPECT_THAT(c.Call({"CF.SCANDUMP", "src", std::to_string(chunk_it)})->str,
              ::testing::StartsWith("ERR no CF.SCANDUMP of 'src' is in progress"));
}

// Issue 33: MULTI ... EXEC of writes. EXEC answers once every write in it
// is durable, so every item of an acknowledged EXEC must survive the kill;
// and an EXEC's writes are one transaction of the write-ahead log, so one
// cut off by the kill (never answered) is there whole or not at all
// (docs/REDIS_COMPATIBILITY.md, Transactions).
TEST(RedisCrashTest, KillDashNineLeavesEveryExecWholeOrAbsentAndLosesNoAcknowledgedOne) {
  TempDir data;
  const std::vector<std::string> flags = {"--wal-segment-size=256KiB", "--wal-max-size=1MiB",
                                          "--snapshot-interval=1s", "--redis-error-rate=1e-6"};
  std::mt19937 rng(33);
  std::mutex mu;
  std::vector<std::string> acked;                 // items of acknowledged EXECs
  std::vector<std::vector<std::string>> cut_off;  // those of EXECs never answered
  uint64_t execs = 0;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(round);
    auto server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    if (round == 0) {
      RespConn c(server->redis_port());
      for (const char* f : {"tx.a", "tx.b"}) {
        std::optional<RespReply> r = c.Call({"CF.RESERVE", f, "4000000"});
        ASSERT_TRUE(r.has_value());
        ASSERT_EQ(r->str, "OK");
      }
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    for (int w = 0; w < 3; ++w) {
      writers.emplace_back([&, w, port = server->redis_port()] {
        RespConn c(port, std::chrono::seconds(10));
        if (!c.ok()) return;
        for (uint64_t batch = 0; !stop.load(); ++batch) {
          // Pipelined: 8 transactions of 40 CF.ADDs, alternating between
          // the two filters (writer 0: all on one, merged into one batch).
          std::string pipeline;
          std::vector<std::vector<std::string>> txs;
          for (int t = 0; t < 8; ++t) {
            txs.emplace_back();
            pipeline += RespConn::Encode({"MULTI"});
            for (int i = 0; i < 40; ++i) {
              txs.back().push_back("r" + std::to_string(round) + "-w" + std::to_string(w) + "-" +
                                   std::to_string(batch) + "-" + std::to_string(t) + "-" +
                                   std::to_string(i));
              pipeline += RespConn::Encode(
                  {"CF.ADD", w == 0 || i % 2 == 0 ? "tx.a" : "tx.b", txs.back().back()});
            }
            pipeline += RespConn::Encode({"EXEC"});
          }
          if (!c.Send(pipeline)) return;
          for (size_t t = 0; t < txs.size(); ++t) {
            bool answered = true;
            for (int i = 0; i < 41 && answered; ++i) {  // OK, then QUEUED each
              std::optional<RespReply> r = c.Read();
              answered = r.has_value();
              if (answered && r->str != (i == 0 ? "OK" : "QUEUED")) {
                ADD_FAILURE() << "reply " << i << " of a transaction: " << r->type << r->str;
              }
            }
            std::optional<RespReply> r = answered ? c.Read() : std::nullopt;
            std::lock_guard<std::mutex> lock(mu);
            if (!r) {  // Killed: this EXEC and the rest are unknown.
              for (size_t u = t; u < txs.size(); ++u) cut_off.push_back(txs[u]);
              return;
            }
            if (r->type != '*' || r->elems.size() != txs[t].size()) {
              ADD_FAILURE() << "EXEC: " << r->type << r->str;
              continue;
            }
            ++execs;
            for (size_t i = 0; i < txs[t].size(); ++i) {
              if (r->elems[i].integer == 1) {
                acked.push_back(txs[t][i]);
              } else {
                ADD_FAILURE() << "CF.ADD " << txs[t][i] << " in EXEC: " << r->elems[i].str;
              }
            }
          }
        }
      });
    }
    size_t before;
    {
      std::lock_guard<std::mutex> lock(mu);
      before = acked.size();
    }
    for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
         std::chrono::steady_clock::now() < deadline;
         std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
      std::lock_guard<std::mutex> lock(mu);
      if (acked.size() - before > 2'000) break;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
    server->process().Signal(SIGKILL);
    ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : writers) t.join();

    server = std::make_unique<RedisCuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->Log();
    // Whether the kill left a transaction open (the restart cut it off).
    const bool cut_open_transaction = absl::StrContains(server->Log(), "cut off a transaction");
    RespConn c(server->redis_port(), std::chrono::seconds(30));
    // Present in either filter (writer 0's items are all in tx.a).
    auto present = [&](const std::vector<std::string>& items) {
      std::vector<bool> out(items.size(), false);
      for (const char* f : {"tx.a", "tx.b"}) {
        for (size_t i = 0; i < items.size(); i += 5000) {
          std::vector<std::string> args = {"CF.MEXISTS", f};
          args.insert(args.end(), items.begin() + i,
                      items.begin() + std::min(items.size(), i + 5000));
          std::optional<RespReply> r = c.Call(args);
          if (!r || r->type != '*' || r->elems.size() != args.size() - 2) {
            ADD_FAILURE() << "CF.MEXISTS failed";
            return out;
          }
          for (size_t j = 0; j < r->elems.size(); ++j) {
            if (r->elems[j].integer == 1) out[i + j] = true;
          }
        }
      }
      return out;
    };
    std::lock_guard<std::mutex> lock(mu);
    const std::vector<bool> found = present(acked);
    const uint64_t missing = std::count(found.begin(), found.end(), false);
    for (size_t i = 0, shown = 0; i < found.size() && shown < 10; ++i) {
      if (!found[i] && ++shown) ADD_FAILURE() << "acknowledged " << acked[i] << " missing";
    }
    EXPECT_EQ(missing, 0u);
    // Each EXEC cut off is there whole or not at all. ("Not at all" may
    // show an item or two as present: a false positive at 1e-6, in two
    // filters.)
    uint64_t cut_items = 0, cut_whole = 0, cut_none = 0, false_positives = 0;
    for (const std::vector<std::string>& tx : cut_off) {
      const std::vector<bool> f = present(tx);
      const uint64_t n = std::count(f.begin(), f.end(), true);
      cut_items += tx.size();
      if (n == tx.size()) {
        ++cut_whole;
      } else if (n <= 2) {
        ++cut_none;
        false_positives += n;
      } else {
        ADD_FAILURE() << "an EXEC cut off by the kill is there in part: " << n << " of its "
                      << tx.size() << " items, from " << tx.front();
      }
    }
    EXPECT_LE(false_positives, 3u);
    std::cout << "round " << round << ": " << execs << " EXECs acknowledged, their " << acked.size()
              << " items all present; " << cut_off.size() << " EXECs (" << cut_items
              << " items) cut off by the kills: " << cut_whole << " whole, " << cut_none
              << " absent (" << false_positives << " false positives), "
              << cut_off.size() - cut_whole - cut_none << " in part"
              << (cut_open_transaction ? "; the restart cut off an open transaction" : "") << "\n";
    server->process().Signal(SIGKILL);
    server->process().Wait();
  }
  EXPECT_GT(acked.size(), 6'000u) << "the load was too light";
}

}  // namespace
}  // namespace cuckoo::testing
