// Whether a conversion writes the index (model.safetensors.index.json): the one rule convert
// writes it by and validate --reference expects it by. Its own small header so that neither
// needs plan/plan.h for it (plan.h is included nearly everywhere).
#pragma once

namespace ckpt {

struct LoadedModel;
struct ConversionPlan;

// When the input had an index (its readers look for one) or the plan writes several shards
// (a loader needs the index to find the tensors); a single shard from an input without one
// stays without one.
bool plan_writes_index(const LoadedModel& in, const ConversionPlan& plan);

}  // namespace ckpt
