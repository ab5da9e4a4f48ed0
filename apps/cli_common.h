// The one CLI convention of ckpt and ckpt-gpu (docs/notes/h-cli.md): -q/--quiet (errors
// only), --progress (force the meter on a non-terminal), --json FILE|- for a report, the
// synopsis line listing every option, one error line format, outputs never over an input,
// stdout checked, and one outcome -> exit code mapping (core/outcome.h).
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/display.h"
#include "core/outcome.h"
#include "core/progress.h"
#include "io/direct_writer.h"
#include "io/output_file.h"
#include "numerics/ggml_dequant.h"

namespace ckptcli {

// The flags every subcommand has.
struct CommonFlags {
  bool quiet = false, progress = false;
  std::string json;  // "" none, "-" stdout, else a file
  CLI::Option* json_option = nullptr;
  ckpt::ProgressMode mode() const { return ckpt::progress_mode(quiet, progress); }
  bool json_to_stdout() const { return json == "-"; }
  // Human output on stdout (not with -q, not when the JSON goes there).
  bool human() const { return !quiet && !json_to_stdout(); }
};

inline void add_quiet(CLI::App* sub, CommonFlags& c, const std::string& what = "errors only: no progress, no summary") {
  sub->add_flag("-q,--quiet", c.quiet, what);
}
inline void add_progress(CLI::App* sub, CommonFlags& c) {
  sub->add_flag("--progress", c.progress,
                "show progress on stderr even when it is not a terminal (a log); -q wins");
}
inline void add_json(CLI::App* sub, CommonFlags& c, const std::string& schema) {
  c.json_option = sub->add_option("--json", c.json, "write the JSON report (" + schema + ") to FILE, or - for stdout")
                      ->type_name("FILE|-");
}
inline void add_common(CLI::App* sub, CommonFlags& c, const std::string& quiet_text = "errors only: no progress, no summary") {
  add_quiet(sub, c, quiet_text);
  add_progress(sub, c);
}

// One error line on stderr (core/display.h: escaped, "PROG SUB: error CODE FILE: message").
inline void print_error(std::string_view prog_sub, std::string_view code, std::string_view file, std::string_view message) {
  std::cerr << ckpt::error_line(prog_sub, code, file, message) << "\n";
}
inline ckpt::Outcome usage_error(std::string_view prog_sub, std::string_view message) {
  print_error(prog_sub, "USAGE", "", message);
  return ckpt::Outcome::usage;
}
// The environment ckptkit reads for meaning, checked before any work: an unknown
// CKPT_DEQUANT_ISA is a usage error (exit 2) naming the value, never a silent fallback.
inline bool environment_ok(std::string_view prog) {
  ckpt::DequantIsa isa;
  std::string error;
  if (ckpt::ggml_dequant_isa_from_environment(isa, error)) return true;
  usage_error(prog, error);
  return false;
}
// Every finding of `f` at or above `min` on stderr, one line each.
inline void print_findings(std::string_view prog_sub, const ckpt::Findings& f,
                           ckpt::Severity min = ckpt::Severity::warning) {
  for (const auto& x : f.items())
    if (x.severity >= min) std::cerr << ckpt::finding_line(prog_sub, x) << "\n";
}

// --buffered, on every command that writes bulk data (io/direct_writer.h).
inline void add_buffered(CLI::App* sub, bool& buffered) {
  sub->add_flag("--buffered", buffered,
                "write outputs through the page cache (dropped behind the writer) instead of O_DIRECT");
}
inline std::string& output_io_prog() {
  static std::string prog;
  return prog;
}
inline void print_output_io_notice(const std::string& file, const std::string& message) {
  ckpt::Findings f;
  f.info("IO_BUFFERED", file, "", std::nullopt, message);
  std::cerr << ckpt::finding_line(output_io_prog(), f.items().front()) << "\n";
}
// How this run writes bulk outputs; a filesystem refusing O_DIRECT is said once on
// stderr (info IO_BUFFERED), not with -q.
inline void apply_output_io(std::string_view prog_sub, bool buffered, bool quiet) {
  ckpt::set_output_io(buffered ? ckpt::OutputIo::buffered : ckpt::OutputIo::direct);
  output_io_prog() = prog_sub;
  ckpt::set_output_io_notice(quiet ? nullptr : &print_output_io_notice);
}

// Refuses (usage, after saying why) any of `targets` that would overwrite an input. "-"
// is standard output: the human text goes there too, so every command checks it (a stdout
// opened onto a shard with `1<>shard` is refused, not written).
inline ckpt::Outcome check_outputs(std::string_view prog_sub, const ckpt::InputSet& inputs,
                                   const std::vector<std::string>& targets) {
  for (const auto& t : targets) {
    if (t.empty()) continue;
    const std::string why = inputs.conflict(t);
    if (!why.empty()) {
      print_error(prog_sub, "OUTPUT_IS_INPUT", t == "-" ? std::string("-") : t, why);
      return ckpt::Outcome::usage;
    }
  }
  return ckpt::Outcome::ok;
}

// Writes a report to target ("" = nothing to do); an error is printed.
inline ckpt::Outcome emit(std::string_view prog_sub, const std::string& target, std::string_view text,
                          const ckpt::InputSet& inputs) {
  if (target.empty()) return ckpt::Outcome::ok;
  std::string error;
  const ckpt::Outcome o = ckpt::write_output(target, text, inputs, error);
  if (o != ckpt::Outcome::ok)
    print_error(prog_sub, o == ckpt::Outcome::usage ? "OUTPUT_IS_INPUT" : "IO_WRITE", target, error);
  return o;
}

// The end of every command: stdout flushed and checked (a full disk, /dev/full: exit 3
// with a message), then the one outcome -> exit code mapping.
inline int finish(std::string_view prog_sub, ckpt::Outcome o) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed || std::ferror(stdout) || !std::cout) {
    const int err = errno ? errno : EIO;
    print_error(prog_sub, "IO_WRITE", "-", std::string("cannot write to standard output: ") + std::strerror(err));
    o = ckpt::worse(o, ckpt::Outcome::io);
  }
  return ckpt::exit_code_for(o);
}

// --help's usage line lists every option (the subcommand's, then the global ones) and the
// positionals, so the synopsis never falls behind the options.
class SynopsisFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string out = "Usage: " + name;
    auto add_options = [&](const CLI::App* a) {
      for (const CLI::Option* opt : a->get_options()) {
        if (!opt->nonpositional() || opt->get_group().empty()) continue;
        const std::string n = opt->get_name();
        if (n == "--help" || n == "--help-all") continue;
        std::string s = n;
        if (opt->get_items_expected_max() > 0) {
          std::string type = opt->get_type_name();
          if (type.empty()) type = "VALUE";
          s += opt->get_items_expected_min() == 0 ? " [" + type + "]" : " " + type;
          if (opt->get_items_expected_max() > 1) s += " ...";
        }
        out += opt->get_required() ? " " + s : " [" + s + "]";
      }
    };
    add_options(app);
    if (app->get_parent() != nullptr) add_options(app->get_parent());
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->nonpositional() || !opt->get_positional()) continue;
      std::string s = opt->get_name(true);
      if (opt->get_items_expected_max() > 1) s += " ...";
      out += opt->get_required() ? " " + s : " [" + s + "]";
    }
    if (!app->get_subcommands([](const CLI::App*) { return true; }).empty()) out += " SUBCOMMAND";
    return out + "\n";
  }
};

}  // namespace ckptcli
