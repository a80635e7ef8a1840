// redis-py (Debian's python3-redis 4.3, a client nobody here wrote) against
// the Redis port of a real cuckood: runs tests/e2e/redis_py_check.py with
// /usr/bin/python3, once against a server without authentication and once
// against one with --auth-tokens (tokens made by cuckooctl hash-token).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/redis_test_util.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPython[] = "/usr/bin/python3";
const std::string kCheckScript = std::string(SOURCE_DIR) + "/tests/e2e/redis_py_check.py";

Result RunCheck(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1", kPython,
                                   kCheckScript};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv);
}

TEST(RedisPyTest, CuckooFilterCommandsPipelinedAndNotAndTheBackupLoop) {
  TempDir dir;
  RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port())});
  for (const char* check :
       {"ok connection", "ok reserve_add_exists", "ok insert_options", "ok keyspace",
        "ok pipelined_thousands", "ok threads", "ok scandump_loadchunk_backup"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("11 checks passed"));
  EXPECT_THAT(r.out, Not(HasSubstr("Traceback (most recent call last)\n  File \"" + kCheckScript +
                                   "\", line")))
      << "a check raised outside of its assertions: " << r.out;
}

// RedisBloom's behaviour with real redis-py code: one item added 40 times
// answers 1 each time and CF.COUNT says 40; repeats stop at "Maximum
// expansions reached"; RedisBloom's error texts, bare; EXPANSION 0 answers
// "Filter is full" once its slots are full.
TEST(RedisPyTest, RepeatedItemsErrorTextsAndExpansionZeroAsRedisBloom) {
  TempDir dir;
  RedisCuckood server(dir.path(), {});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--bloom-fidelity"});
  for (const char* check :
       {"ok bloom_repeated_item_grows_and_counts", "ok bloom_repeats_stop_at_maximum_expansions",
        "ok bloom_error_texts", "ok bloom_expansion_zero_is_full"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 checks passed"));
}

// Argument errors of write commands raise redis-py's exceptions (regression:
// once never answered), and pipelined lookups of present and absent items
// mixed on a multi-shard filter are right (regression: once wrong).
TEST(RedisPyTest, WriteArgumentErrorsRaiseAndMixedLookupsAreRight) {
  TempDir dir;
  RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--error-checks"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ok pipelined_mixed_answers\n"));
  EXPECT_THAT(r.out, HasSubstr("ok write_argument_errors\n"));
}

// CF.SCANDUMP / CF.LOADCHUNK as RedisBloom's users run them: the documented
// backup loop (an empty filter's included), on a pooled client, dumps held
// by their connection and given back when it goes, and the time a dump and
// load of 1,000,000 items take (printed).
TEST(RedisPyTest, DumpsRoundTripOnOneConnectionAndEndWithIt) {
  TempDir dir;
  RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--dumps-checks"});
  std::cout << r.out;
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* check :
       {"ok dumps_empty_filter_round_trip", "ok dumps_pool_loop_keeps_one_connection",
        "ok dumps_million_items_round_trip"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_THAT(r.out, HasSubstr("3 checks passed"));
}

// Issue 33: redis-py's transactional pipeline (MULTI ... EXEC), an aborted
// one, DISCARD, WATCH's refusal, and UNLINK, MEMORY USAGE, MODULE LIST,
// FLUSHDB, FLUSHALL, CLIENT LIST and CLIENT KILL, on a server of their own
// (FLUSHALL drops every filter).
TEST(RedisPyTest, TransactionsAndTheKeyspaceCommandsClientsUse) {
  TempDir dir;
  RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--multi-checks"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* check : {"ok multi_transactional_pipeline", "ok multi_nothing_runs_before_exec",
                            "ok multi_aborted_transaction", "ok multi_watch_is_refused",
                            "ok multi_keyspace_commands", "ok multi_client_list_and_kill"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_THAT(r.out, HasSubstr("6 checks passed"));
}

// Key expiry as Redis 7 has it (EXPIRE family, TTL, PERSIST, EXPIRETIME),
// over a real cuckood: daily dedup filters with a TTL, gone at their time.
TEST(RedisPyTest, KeyExpiryAsRedisSevenWithTtlPersistAndTheConditions) {
  TempDir dir;
  RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--expiry-checks"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* check :
       {"ok expiry_daily_dedup_filter_with_a_ttl",
        "ok expiry_the_filter_is_gone_at_its_time_and_cf_add_makes_a_new_one",
        "ok expiry_absolute_times_and_times_in_the_past_delete_now",
        "ok expiry_nx_xx_gt_lt_as_redis_7", "ok expiry_bad_arguments_get_redis_error_texts",
        "ok expiry_commands_queue_in_multi_and_pipeline",
        "ok expiry_a_dump_carries_the_expiry_into_the_loaded_filter",
        "ok expiry_is_listed_by_command_and_info_is_unchanged"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_THAT(r.out, HasSubstr("8 checks passed"));
}

TEST(RedisPyTest, TokensAuthenticateAndPermissionErrorsAreNoPerm) {
  TempDir dir;
  auto token = [](const std::string& name, const std::string& grant) {
    Result r = RunProcess({CUCKOOCTL_PATH, "hash-token", name, "--grant=" + grant});
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    std::istringstream in(r.out);
    std::string t, entry;
    std::getline(in, t);
    std::getline(in, entry);
    return std::pair{t, entry};
  };
  const auto [admin, admin_entry] = token("ops", "admin:*");
  const auto [reader, reader_entry] = token("reader", "read:*");
  const std::string access = dir.path() + "/access.conf";
  WriteFile(access, admin_entry + "\n" + reader_entry + "\n");
  TempDir data;
  RedisCuckood server(data.path(), {"--redis-error-rate=1e-7", "--auth-tokens=" + access});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--admin-token", admin,
                       "--reader-token", reader});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* check :
       {"ok auth_with_token", "ok reader_token", "ok permission_errors_are_noperm",
        "ok expiry_needs_admin_and_ttl_needs_read", "ok no_or_wrong_token"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_THAT(r.out, HasSubstr("5 checks passed"));
}

// RENAME and RENAMENX as redis-py sends them, then their durability: the
// same data directory served again after a clean stop.
TEST(RedisPyTest, RenameAndRenamenxAsRedisAndTheirResultsSurviveARestart) {
  TempDir dir;
  {
    RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
    ASSERT_TRUE(server.ready()) << server.Log();
    Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--rename-checks"});
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    for (const char* check :
         {"ok rename_moves_the_filter_with_its_items", "ok rename_replaces_the_destination",
          "ok rename_errors_as_redis", "ok renamenx_only_to_a_free_name",
          "ok rename_in_a_pipeline_and_a_transaction", "ok rename_rotation_while_writing",
          "ok rename_command_metadata",
          "ok rename_keeps_the_ttl_and_an_expired_destination_is_free"}) {
      EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
    }
    EXPECT_THAT(r.out, HasSubstr("8 checks passed"));
  }
  RedisCuckood again(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(again.ready()) << again.Log();
  Result r = RunCheck({"--port", std::to_string(again.redis_port()), "--rename-restarted-checks"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ok renames_survive_a_restart\n")) << r.out << r.err;
}

TEST(RedisPyTest, RenameNeedsTheAdminGrantOnBothNames) {
  TempDir dir;
  auto token = [](const std::string& name, const std::string& grant) {
    Result r = RunProcess({CUCKOOCTL_PATH, "hash-token", name, "--grant=" + grant});
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    std::istringstream in(r.out);
    std::string t, entry;
    std::getline(in, t);
    std::getline(in, entry);
    return std::pair{t, entry};
  };
  const auto [admin, admin_entry] = token("ops", "admin:*");
  const auto [scoped, scoped_entry] = token("rotator", "admin:rot:*");
  const std::string access = dir.path() + "/access.conf";
  WriteFile(access, admin_entry + "\n" + scoped_entry + "\n");
  TempDir data;
  RedisCuckood server(data.path(), {"--redis-error-rate=1e-7", "--auth-tokens=" + access});
  ASSERT_TRUE(server.ready()) << server.Log();
  Result r = RunCheck({"--port", std::to_string(server.redis_port()), "--admin-token", admin,
                       "--scoped-token", scoped});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ok rename_needs_admin_on_both_names\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 checks passed"));
}

}  // namespace
}  // namespace cuckoo::testing
