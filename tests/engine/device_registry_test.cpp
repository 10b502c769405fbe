// Stage 11/12 seam tests: the device registry (a context builds the backends it names,
// unknown and repeated names are errors before any work) and the per-graph backend
// state (every backend prepares each graph uid once, before its first execute, and
// releases it when the graph cache drops the graph or the context goes away), driven
// through real decodes of a tiny model with a recording backend beside the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "engine_fixture.h"
#include "graph/cache.h"

namespace minfer::engine {
namespace {

using testing::make_engine;
using testing::make_engine_status;
using testing::run;
using testing::same_bits;
using testing::TinySpec;

// What a recording device saw; shared by the factory and the test.
struct Record {
  std::vector<uint64_t> prepared;
  std::vector<uint64_t> released;
  int executes = 0;
  graph::BackendId id = -1;
};

// A backend that runs nothing (it supports no op, so the scheduler never places a
// node on it) and records the per-graph calls every registered backend receives.
class Recorder final : public backend::Backend {
 public:
  Recorder(graph::BackendId id, Record& rec) : id_(id), rec_(rec) { rec_.id = id; }
  std::string_view name() const override { return "recorder"; }
  graph::BackendId id() const override { return id_; }
  bool supports_op(const graph::Node&, std::span<const DType>) const override { return false; }
  Status execute(const graph::ComputeGraph&, std::span<const graph::NodeId>,
                 const backend::NodeData&) override {
    rec_.executes++;
    return Ok{};
  }
  Status prepare(const graph::ComputeGraph& g) override {
    rec_.prepared.push_back(g.uid());
    return Ok{};
  }
  void release(uint64_t uid) override { rec_.released.push_back(uid); }

 private:
  graph::BackendId id_;
  Record& rec_;
};

// Registers "recorder" for the test's lifetime.
struct ScopedRecorder {
  Record rec;
  ScopedRecorder() {
    Status st = backend::Registry::global().add(
        {.info = {.name = "recorder", .description = "records per-graph calls"},
         .create = [this](graph::BackendId id) -> Result<std::unique_ptr<backend::Backend>> {
           return std::unique_ptr<backend::Backend>(new Recorder(id, rec));
         }});
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  }
  ~ScopedRecorder() { backend::Registry::global().remove("recorder"); }
};

TEST(DeviceRegistry, ListsTheCpuFirstThenRegisteredDevices) {
  const auto before = list_devices(2);
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(before[0].name, "cpu");
  EXPECT_NE(before[0].description.find("2 thread(s)"), std::string::npos) << before[0].description;
  ScopedRecorder scoped;
  const auto after = list_devices(2);
  ASSERT_EQ(after.size(), before.size() + 1);
  EXPECT_EQ(after.back().name, "recorder");
  // Names are unique and "cpu" is built in.
  EXPECT_FALSE(
      backend::Registry::global()
          .add({.info = {.name = "recorder"},
                .create = [](graph::BackendId) -> Result<std::unique_ptr<backend::Backend>> {
                  return make_error("unused");
                }})
          .ok());
  EXPECT_FALSE(
      backend::Registry::global()
          .add({.info = {.name = "cpu"},
                .create = [](graph::BackendId) -> Result<std::unique_ptr<backend::Backend>> {
                  return make_error("unused");
                }})
          .ok());
}

TEST(DeviceRegistry, UnknownOrRepeatedDeviceIsAnErrorNamingIt) {
  auto unknown = make_engine_status(TinySpec{}, {.n_threads = 1, .devices = {"nosuch"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("unknown device 'nosuch' (available: cpu"),
            std::string::npos)
      << unknown.error().message;
  auto twice = make_engine_status(TinySpec{}, {.n_threads = 1, .devices = {"cpu", "cpu"}});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("named twice"), std::string::npos) << twice.error().message;
  EXPECT_TRUE(make_engine_status(TinySpec{}, {.n_threads = 1, .devices = {"cpu"}}).ok());
}

TEST(DeviceSeam, EveryBackendPreparesEachGraphOnceAndReleasesItWhenTheCacheDropsIt) {
  ScopedRecorder scoped;
  Record& rec = scoped.rec;
  auto with = make_engine(TinySpec{}, 1, 256, "seam-rec", {.devices = {"recorder"}});
  auto alone = make_engine(TinySpec{}, 1, 256, "seam-cpu");
  ASSERT_TRUE(with.engine && alone.engine);
  EXPECT_GT(rec.id, graph::kBackendCpu);

  // More prompt shapes than the cache holds (kMaxCachedGraphs): each new shape is a new
  // graph uid, prepared once; the oldest are evicted and released.
  std::set<uint64_t> uids;
  const std::vector<uint32_t> shapes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 3, 1};
  for (uint32_t n : shapes) {
    with->clear_kv();
    alone->clear_kv();
    std::vector<int32_t> tokens(n, 5);
    const auto a = run(*with, tokens, testing::iota_positions(n), 1);
    const auto b = run(*alone, tokens, testing::iota_positions(n), 1);
    EXPECT_TRUE(same_bits(a, b)) << n << " rows";  // no node moved: the CPU ran all
    uids.insert(with->stats().graph_uid);
  }
  EXPECT_EQ(rec.executes, 0);  // it supports nothing, so nothing ran on it
  // One prepare per uid the runtime planned, none twice.
  EXPECT_EQ(rec.prepared.size(), with->cache_stats().rebuilds);
  EXPECT_EQ(std::set<uint64_t>(rec.prepared.begin(), rec.prepared.end()).size(),
            rec.prepared.size());
  // Shapes 3 and 1 came back after eviction: rebuilt with new uids, prepared again.
  EXPECT_EQ(rec.prepared.size(), shapes.size());
  EXPECT_GT(with->cache_stats().evictions, 0u);
  // Every eviction released its uid on the backend, and nothing still cached was.
  EXPECT_EQ(rec.released.size(), with->cache_stats().evictions);
  for (uint64_t uid : rec.released) {
    EXPECT_NE(std::find(rec.prepared.begin(), rec.prepared.end(), uid), rec.prepared.end());
  }
  EXPECT_EQ(rec.prepared.size() - rec.released.size(), with->cache()->size());
  EXPECT_EQ(with->scheduler_plans(), with->cache()->size());
  // The context goes: every uid still cached is released too.
  with.engine.reset();
  std::vector<uint64_t> p = rec.prepared, r = rec.released;
  std::sort(p.begin(), p.end());
  std::sort(r.begin(), r.end());
  EXPECT_EQ(p, r);
}

}  // namespace
}  // namespace minfer::engine
