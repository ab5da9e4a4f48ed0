// Entries of a quantization config's exclusion list (modules_to_not_convert, ignore,
// exclude_modules, ignored_layers), matched with the semantics of the tools that write them:
//   * "re:PATTERN" (compressed-tensors): Python's re.match, a match anchored at the start of
//     the module name (PATTERN ending in '$' must reach its end). ckptkit implements the
//     subset that real lists use: literals, '.', classes [..] / [^..] with ranges, \d \w \s
//     \D \W \S and escaped punctuation, quantifiers * + ? (lazy forms too), '^' at the start,
//     '$' at the end, and '|' between whole alternatives. Groups, counted repetition {m,n},
//     backreferences and lookarounds are not implemented: such an entry is refused by name.
//   * an entry with '*', '?' or '[' (ModelOpt's and gpt-oss' lists): Python's fnmatchcase over
//     the whole name: '*' any run (dots included), '?' one character, [seq] / [!seq] a class
//     with ranges, an unclosed '[' a literal.
//   * any other entry: whole dotted components ("lm_head" matches "model.lm_head", "mlp.gate"
//     matches "model.layers.0.mlp.gate" but not "...mlp.gate_proj").
// Matching is linear in pattern times name length: a hostile pattern cannot make it hang.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt {

// The longest entry evaluated: longer ones are refused (module_pattern_problem).
inline constexpr size_t kMaxModulePatternBytes = 1024;

// Why `entry` cannot be evaluated (an re: pattern outside the subset above, an entry longer
// than kMaxModulePatternBytes), or nullopt.
std::optional<std::string> module_pattern_problem(std::string_view entry);

// True when `entry` matches module `name`. An entry module_pattern_problem refuses matches nothing.
bool module_pattern_matches(std::string_view entry, std::string_view name);

}  // namespace ckpt
