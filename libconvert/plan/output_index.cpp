// Whether a conversion writes the index (plan/output_index.h).
#include "plan/output_index.h"

#include "formats/loader.h"
#include "plan/plan.h"

namespace ckpt {

bool plan_writes_index(const LoadedModel& in, const ConversionPlan& plan) {
  return in.checkpoint.index.present || plan.shards.size() > 1;
}

}  // namespace ckpt
