// Exclusion-list entries matched as the tools that write them match them (module_pattern.h).
#include "model/module_pattern.h"

#include <array>
#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace ckpt {
namespace {

// ---- fnmatch (Python fnmatch.fnmatchcase) -------------------------------------------------

// The class starting at pat[p] == '[': its end (one past ']') and the set, or nullopt when
// unclosed (then '[' is a literal, as fnmatch.translate makes it).
std::optional<size_t> glob_class(std::string_view pat, size_t p, std::bitset<256>& set) {
  size_t i = p + 1;
  bool negate = false;
  if (i < pat.size() && pat[i] == '!') {
    negate = true;
    ++i;
  }
  const size_t first = i;
  while (i < pat.size() && (pat[i] != ']' || i == first)) ++i;  // ']' first is a member
  if (i >= pat.size()) return std::nullopt;
  set.reset();
  for (size_t j = first; j < i; ++j) {
    const auto lo = static_cast<unsigned char>(pat[j]);
    if (j + 2 < i && pat[j + 1] == '-') {
      const auto hi = static_cast<unsigned char>(pat[j + 2]);
      for (unsigned c = lo; c <= hi; ++c) set.set(c);
      j += 2;
    } else {
      set.set(lo);
    }
  }
  if (negate) set.flip();
  return i + 1;
}

// One step of the pattern at pat[p] against character c: the next pattern index, or nullopt.
// '*' is handled by the caller.
std::optional<size_t> glob_step(std::string_view pat, size_t p, unsigned char c) {
  if (pat[p] == '?') return p + 1;
  if (pat[p] == '[') {
    std::bitset<256> set;
    if (auto end = glob_class(pat, p, set)) return set.test(c) ? std::optional<size_t>(*end) : std::nullopt;
  }
  return static_cast<unsigned char>(pat[p]) == c ? std::optional<size_t>(p + 1) : std::nullopt;
}

// Classic star backtracking: linear in practice and O(pattern x name) at worst.
bool glob_match(std::string_view pat, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (auto next = p < pat.size() ? glob_step(pat, p, static_cast<unsigned char>(s[i])) : std::nullopt) {
      p = *next;
      ++i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

// ---- re: subset (Python re.match) ------------------------------------------------------

struct Atom {
  std::bitset<256> set;
  char quant = 0;  // 0, '*', '+', '?'
};
struct Alternative {
  bool anchored_end = false;
  std::vector<Atom> atoms;
};

std::bitset<256> range_set(unsigned lo, unsigned hi) {
  std::bitset<256> s;
  for (unsigned c = lo; c <= hi; ++c) s.set(c);
  return s;
}

// \d \w \s and their negations; other escapes are the literal character (punctuation).
std::optional<std::bitset<256>> escape_set(char e, std::string& problem) {
  std::bitset<256> s;
  switch (e) {
    case 'd': return range_set('0', '9');
    case 'D': return ~range_set('0', '9');
    case 'w': return range_set('a', 'z') | range_set('A', 'Z') | range_set('0', '9') | range_set('_', '_');
    case 'W': return ~(range_set('a', 'z') | range_set('A', 'Z') | range_set('0', '9') | range_set('_', '_'));
    case 's': return range_set('\t', '\r') | range_set(' ', ' ');
    case 'S': return ~(range_set('\t', '\r') | range_set(' ', ' '));
    default: break;
  }
  const auto c = static_cast<unsigned char>(e);
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    problem = std::string("the escape \\") + e + " is not implemented";
    return std::nullopt;
  }
  s.set(c);
  return s;
}

// [..] at pat[i] == '[': the set, with i moved past ']'.
std::optional<std::bitset<256>> regex_class(std::string_view pat, size_t& i, std::string& problem) {
  ++i;
  bool negate = false;
  if (i < pat.size() && pat[i] == '^') {
    negate = true;
    ++i;
  }
  std::bitset<256> set;
  const size_t first = i;
  while (i < pat.size() && (pat[i] != ']' || i == first)) {
    unsigned lo = static_cast<unsigned char>(pat[i]);
    if (pat[i] == '\\') {
      if (i + 1 >= pat.size()) break;
      auto e = escape_set(pat[i + 1], problem);
      if (!e) return std::nullopt;
      set |= *e;
      i += 2;
      continue;
    }
    if (pat[i] == '[') {
      problem = "a '[' inside a class is not implemented";
      return std::nullopt;
    }
    if (i + 2 < pat.size() && pat[i + 1] == '-' && pat[i + 2] != ']') {
      set |= range_set(lo, static_cast<unsigned char>(pat[i + 2]));
      i += 3;
      continue;
    }
    set.set(lo);
    ++i;
  }
  if (i >= pat.size()) {
    problem = "an unclosed '['";
    return std::nullopt;
  }
  ++i;
  return negate ? ~set : set;
}

std::optional<Alternative> parse_alternative(std::string_view pat, std::string& problem) {
  Alternative alt;
  size_t i = 0;
  if (i < pat.size() && pat[i] == '^') ++i;  // re.match is anchored already
  while (i < pat.size()) {
    const char c = pat[i];
    if (c == '$' && i + 1 == pat.size()) {
      alt.anchored_end = true;
      ++i;
      continue;
    }
    if (c == '(' || c == ')' || c == '{' || c == '}' || c == '$' || c == '^') {
      problem = std::string("'") + c + "' (groups, counted repetition and inner anchors) is not implemented";
      return std::nullopt;
    }
    if (c == '*' || c == '+' || c == '?') {
      problem = std::string("'") + c + "' follows nothing it can repeat";
      return std::nullopt;
    }
    Atom a;
    if (c == '.') {
      a.set.set();
      a.set.reset('\n');
      ++i;
    } else if (c == '[') {
      auto s = regex_class(pat, i, problem);
      if (!s) return std::nullopt;
      a.set = *s;
    } else if (c == '\\') {
      if (i + 1 >= pat.size()) {
        problem = "a trailing '\\'";
        return std::nullopt;
      }
      auto s = escape_set(pat[i + 1], problem);
      if (!s) return std::nullopt;
      a.set = *s;
      i += 2;
    } else {
      a.set.set(static_cast<unsigned char>(c));
      ++i;
    }
    if (i < pat.size() && (pat[i] == '*' || pat[i] == '+' || pat[i] == '?')) {
      a.quant = pat[i++];
      if (i < pat.size() && pat[i] == '?') ++i;  // lazy: the same set of matches
      if (i < pat.size() && (pat[i] == '*' || pat[i] == '+' || pat[i] == '{')) {
        problem = "a repeated quantifier is not implemented";
        return std::nullopt;
      }
    }
    alt.atoms.push_back(a);
  }
  return alt;
}

std::optional<std::vector<Alternative>> parse_regex(std::string_view pat, std::string& problem) {
  std::vector<Alternative> alts;
  size_t start = 0;
  for (size_t i = 0; i <= pat.size(); ++i) {
    if (i < pat.size() && pat[i] == '\\') {
      ++i;  // an escaped '|' is no separator
      continue;
    }
    if (i < pat.size() && pat[i] != '|') continue;
    auto alt = parse_alternative(pat.substr(start, i - start), problem);
    if (!alt) return std::nullopt;
    alts.push_back(std::move(*alt));
    start = i + 1;
  }
  return alts;
}

// Positions of `s` reachable after each atom, a set per step: O(atoms x name) time.
bool alternative_matches(const Alternative& alt, std::string_view s) {
  std::vector<char> at(s.size() + 1, 0), next(s.size() + 1, 0);
  at[0] = 1;
  for (const Atom& a : alt.atoms) {
    std::fill(next.begin(), next.end(), 0);
    for (size_t i = 0; i <= s.size(); ++i) {
      if (!at[i]) continue;
      if (a.quant == '*' || a.quant == '?') next[i] = 1;
      if (a.quant == '*' || a.quant == '+') {
        for (size_t j = i; j < s.size() && a.set.test(static_cast<unsigned char>(s[j])); ++j) {
          if (next[j + 1]) break;  // reached from an earlier start already: the rest too
          next[j + 1] = 1;
        }
      } else if (i < s.size() && a.set.test(static_cast<unsigned char>(s[i]))) {
        next[i + 1] = 1;
      }
    }
    at.swap(next);
  }
  if (alt.anchored_end) return at[s.size()] != 0;
  for (char reached : at)
    if (reached) return true;
  return false;
}

bool is_glob(std::string_view e) { return e.find_first_of("*?[") != std::string_view::npos; }

}  // namespace

std::optional<std::string> module_pattern_problem(std::string_view entry) {
  // No module name is this long; a longer entry would only make matching slow (a glob class
  // is rescanned at each step).
  if (entry.size() > kMaxModulePatternBytes)
    return "an entry of " + std::to_string(entry.size()) + " bytes (at most " + std::to_string(kMaxModulePatternBytes) +
           ")";
  if (!entry.starts_with("re:")) return std::nullopt;
  std::string problem;
  if (!parse_regex(entry.substr(3), problem)) return problem;
  return std::nullopt;
}

bool module_pattern_matches(std::string_view e, std::string_view name) {
  if (e.empty() || e.size() > kMaxModulePatternBytes) return false;
  if (e.starts_with("re:")) {
    std::string problem;
    auto alts = parse_regex(e.substr(3), problem);
    if (!alts) return false;
    for (const auto& alt : *alts)
      if (alternative_matches(alt, name)) return true;
    return false;
  }
  if (is_glob(e)) return glob_match(e, name);
  for (size_t at = name.find(e); at != std::string_view::npos; at = name.find(e, at + 1)) {
    const size_t end = at + e.size();
    if ((at == 0 || name[at - 1] == '.') && (end == name.size() || name[end] == '.')) return true;
  }
  return false;
}

}  // namespace ckpt
