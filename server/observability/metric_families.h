// Building the families a MetricsCollector appends (metrics.h): prometheus-cpp's
// metric model, with the few helpers every collector needs.
//
//   void AppendThings(const Things& t, MetricFamilies* out) {
//     AddGauge(out, "cuckood_things", "Things held", t.size());
//     prometheus::MetricFamily& f = AddFamily(out, "cuckood_thing_bytes", "Bytes by thing",
//                                             prometheus::MetricType::Gauge);
//     for (const Thing& x : t) AddSeries(f, {{"thing", x.name}}).gauge.value = x.bytes;
//   }
#ifndef CUCKOO_SERVER_OBSERVABILITY_METRIC_FAMILIES_H_
#define CUCKOO_SERVER_OBSERVABILITY_METRIC_FAMILIES_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "server/observability/metrics.h"

namespace cuckoo::server {

// A family with no series yet.
inline prometheus::MetricFamily NewFamily(std::string name, std::string help,
                                          prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

// A new family at the end of `out`; the reference lasts until `out` grows.
inline prometheus::MetricFamily& AddFamily(MetricFamilies* out, std::string name, std::string help,
                                           prometheus::MetricType type) {
  return out->emplace_back(NewFamily(std::move(name), std::move(help), type));
}

// A new series of `family`, with `labels`; the caller sets its value.
inline prometheus::ClientMetric& AddSeries(
    prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric& m = family.metric.emplace_back();
  m.label = std::move(labels);
  return m;
}

// A gauge family of one series without labels.
inline void AddGauge(MetricFamilies* out, std::string name, std::string help, double value) {
  AddSeries(AddFamily(out, std::move(name), std::move(help), prometheus::MetricType::Gauge))
      .gauge.value = value;
}

// A counter family of one series without labels.
inline void AddCounter(MetricFamilies* out, std::string name, std::string help, double value) {
  AddSeries(AddFamily(out, std::move(name), std::move(help), prometheus::MetricType::Counter))
      .counter.value = value;
}

// A histogram from per-bucket (not cumulative) counts, the last one +Inf.
template <size_t N, size_t B>
void FillHistogram(const std::array<uint64_t, N>& counts, const std::array<double, B>& bounds,
                   double sum, prometheus::ClientMetric* m) {
  static_assert(N == B + 1);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < N; ++i) {
    cumulative += counts[i];
    m->histogram.bucket.push_back(
        {.cumulative_count = cumulative,
         .upper_bound = i < B ? bounds[i] : std::numeric_limits<double>::infinity()});
  }
  m->histogram.sample_count = cumulative;
  m->histogram.sample_sum = sum;
}

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_OBSERVABILITY_METRIC_FAMILIES_H_
