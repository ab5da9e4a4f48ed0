// The FP8 weight of a block scale (model/scale_weight.h).
#include "model/scale_weight.h"

#include <string_view>

namespace ckpt {

const ModelTensor* fp8_weight_of_scale(const ModelView& view, const std::string& scale) {
  for (std::string_view suffix : {".weight_scale_inv", ".weight_scale", ".scale"})
    if (scale.ends_with(suffix)) {
      const std::string module = scale.substr(0, scale.size() - suffix.size());
      if (const ModelTensor* w = view.find(module + ".weight")) return w;
      return view.find(module);
    }
  return nullptr;
}

}  // namespace ckpt
