#include "report/convert_report.h"

#include <cstdio>

#include "core/display.h"
#include "core/build_info.h"
#include "formats/json_writer.h"
#include "report/validation_report.h"

namespace ckpt {
namespace {

void write_totals(JsonWriter& w, const ConvertReport& r) {
  const ConversionPlan& p = r.plan;
  w.key("totals").begin_object();
  w.key("shards").value(static_cast<uint64_t>(p.shards.size()));
  w.key("tensors").value(p.tensors_out).key("payload_bytes").value(p.payload_out);
  w.key("converted").value(p.converted).key("copied").value(p.copied).key("dropped_scales").value(p.dropped_scales);
  w.key("expert_weight_tensors").value(p.expert_weight_tensors).key("mtp_tensors").value(p.mtp_tensors);
  w.key("remapped_expert_tensors").value(p.remapped_expert_tensors);
  w.key("consumed_expert_tensors").value(p.consumed_expert_tensors);
  w.key("dequantized_expert_tensors").value(p.dequantized_experts);
  w.key("expert_bytes_in").value(p.expert_bytes_in).key("expert_bytes_out").value(p.expert_bytes_out);
  w.key("bytes_in").value(p.bytes_in).key("bytes_out").value(p.shard_bytes_out + p.side_bytes);
  w.key("disk_needed").value(r.disk_needed).key("disk_free").value(r.disk_free);
  w.end_object();
}

void write_shards(JsonWriter& w, const ConversionPlan& p) {
  w.key("shards").begin_array();
  for (const auto& s : p.shards) {
    w.begin_object().key("name").value(s.name);
    w.key("tensors").value(static_cast<uint64_t>(s.writer_tensors.size()));
    w.key("converted").value(s.converted).key("copied").value(s.copied).key("dropped_scales").value(s.dropped_scales);
    w.key("payload_bytes").value(s.payload_bytes).key("file_bytes").value(s.file_bytes);
    w.end_object();
  }
  w.end_array();
}

// Remap statistics per fused matrix (mxfp4-int8-shift.md §8).
void write_remap(JsonWriter& w, const ConvertReport& r) {
  w.key("remap").begin_array();
  for (const auto& [index, st] : r.remap_stats) {
    const FusedMatrix& m = r.plan.fused[index];
    auto rate = [](uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 1.0; };
    w.begin_object().key("block").value(m.block).key("matrix").value(m.matrix);
    w.key("num_weights").value(st.num_weights).key("nonzero").value(st.nonzero);
    w.key("exact_rate_all").value(rate(st.exact_all, st.num_weights));
    w.key("exact_rate_nonzero").value(rate(st.exact_nonzero, st.nonzero));
    w.key("overflow_count").value(st.overflow);
    w.key("max_rel_err_nonzero").value(st.max_rel_err_nonzero);
    w.key("mean_rel_err_nonzero").value(st.nonzero ? st.sum_rel_err_nonzero / static_cast<double>(st.nonzero) : 0.0);
    w.key("blocks").value(st.blocks).key("blocks_folded").value(st.blocks_folded);
    w.key("vanished_nonzero").value(st.vanished_nonzero);
    w.key("row_span_max").value(static_cast<int64_t>(st.row_span_max));
    w.key("row_span_hist").begin_array();
    for (uint64_t c : st.row_span_hist) w.value(c);
    w.end_array().end_object();
  }
  w.end_array();
}

// Scale-out: the partition assignment (every partition's shards and bytes, so one
// --dry-run shows the whole split) and the --finalize check.
void write_partition(JsonWriter& w, const ConvertReport& r, const ConvertOptions& o) {
  if (r.partition.active()) {
    auto bins = partition_bins(r.shard_partition, shard_file_bytes(r.plan), r.partition.count);
    w.key("partition").begin_object().key("index").value(r.partition.index).key("count").value(r.partition.count);
    w.key("bins").begin_array();
    for (uint32_t b = 0; b < bins.size(); ++b) {
      w.begin_object().key("index").value(b).key("file_bytes").value(bins[b].bytes).key("shards").begin_array();
      for (size_t i : bins[b].items) w.value(r.plan.shards[i].name);
      w.end_array().end_object();
    }
    w.end_array().end_object();
  }
  if (o.finalize) {
    w.key("finalize").begin_object().key("partitions").value(r.finalize.partitions);
    w.key("shards_verified").value(r.finalize.shards_verified).key("bytes_verified").value(r.finalize.bytes_verified);
    w.key("rerun").begin_array();
    for (uint32_t p : r.finalize.rerun) w.value(p);
    w.end_array().end_object();
  }
}

void print_partition(const ConvertReport& r, const ConvertOptions& o, std::ostream& out) {
  if (r.partition.active() && r.dry_run) {
    auto bins = partition_bins(r.shard_partition, shard_file_bytes(r.plan), r.partition.count);
    out << "  partitions (" << r.partition.count << ", balanced by output bytes; this run is " << r.partition.text()
        << "):\n";
    for (uint32_t b = 0; b < bins.size(); ++b) {
      out << (b == r.partition.index ? "  * " : "    ") << b << "/" << r.partition.count << ": "
          << bins[b].items.size() << (bins[b].items.size() == 1 ? " shard, " : " shards, ") << with_commas(bins[b].bytes)
          << " bytes";
      for (size_t k = 0; k < bins[b].items.size(); ++k) out << (k ? ", " : ": ") << display_escape(r.plan.shards[bins[b].items[k]].name);
      out << "\n";
    }
  }
  if (o.finalize && r.status == ConvertStatus::ok)
    out << "  verified " << r.finalize.shards_verified << " shards (" << with_commas(r.finalize.bytes_verified)
        << " bytes: records, input identity, output size and xxh3)"
        << (r.dry_run ? "; nothing written (dry run)\n" : "; wrote the side files, index and config.json\n");
}

}  // namespace

std::vector<uint64_t> shard_file_bytes(const ConversionPlan& plan) {
  std::vector<uint64_t> bytes;
  for (const auto& s : plan.shards) bytes.push_back(s.file_bytes);
  return bytes;
}

const char* convert_status_name(ConvertStatus s) { return outcome_name(outcome_of(s)); }

std::string convert_report_json(const ConvertReport& r, const ConvertOptions& o) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(kConvertSchemaId);
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("input").value(o.input).key("output").value(o.output).key("experts").value(expert_mode_name(r.plan.experts));
  if (r.plan.experts == ExpertMode::int8_shift)
    w.key("int8_shift").begin_object().key("headroom_bits").value(r.plan.remap.headroom)
        .key("rounding").value(remap_rounding_name(r.plan.remap.rounding)).end_object();
  if (!r.plan.quant_profile.empty()) w.key("quant_profile").value(r.plan.quant_profile);
  w.key("dry_run").value(r.dry_run).key("status").value(convert_status_name(r.status));
  w.key("block_size").begin_array().value(r.plan.pairing.block_rows).value(r.plan.pairing.block_cols).end_array();
  write_totals(w, r);
  write_shards(w, r.plan);
  write_remap(w, r);
  w.key("side_files").begin_array();
  for (const auto& f : r.plan.side_files) w.value(f);
  w.end_array();
  if (!r.plan.dropped_side_files.empty()) {
    w.key("dropped_side_files").begin_array();
    for (const auto& f : r.plan.dropped_side_files) w.value(f);
    w.end_array();
  }
  w.key("config");
  if (r.config_json.empty())
    w.null();
  else
    w.raw(r.config_json.substr(0, r.config_json.find_last_not_of("\n") + 1));
  w.key("result").begin_object();
  w.key("shards_written").value(r.shards_written).key("shards_resumed").value(r.shards_resumed);
  w.key("bytes_written").value(r.bytes_written).key("seconds").value(r.seconds);
  w.key("peak_rss_bytes").value(r.peak_rss_bytes).end_object();
  if (!r.input_sha256.empty()) {
    w.key("input_sha256").begin_array();
    for (const auto& h : r.input_sha256) {
      w.begin_object().key("file").value(h.name).key("bytes").value(h.size).key("sha256");
      if (h.sha256.empty())
        w.null();
      else
        w.value(h.sha256);
      if (!h.error.empty()) w.key("error").value(h.error);
      w.end_object();
    }
    w.end_array();
  }
  write_partition(w, r, o);
  write_findings_json(w, r.findings);
  w.end_object();
  return w.str() + "\n";
}

// The plan summary: what will be written and the disk it needs (before writing starts).
void print_convert_plan(const ConvertReport& r, const ConvertOptions& o, std::ostream& out) {
  const ConversionPlan& p = r.plan;
  out << "  tensors " << with_commas(p.tensors_out) << " (" << with_commas(p.converted - p.dequantized_experts)
      << " FP8 -> BF16, ";
  if (p.dequantized_experts) out << with_commas(p.dequantized_experts) << " MXFP4 experts -> BF16, ";
  out << with_commas(p.copied) << " copied, " << with_commas(p.dropped_scales) << " scales dropped), payload "
      << with_commas(p.payload_out) << " bytes\n";
  if (!p.fused.empty())
    out << "  experts: " << p.fused.size() << " fused INT8-shift matrices from " << with_commas(p.consumed_expert_tensors)
        << " MXFP4 tensors (headroom " << p.remap.headroom << ", rounding " << remap_rounding_name(p.remap.rounding) << ")\n";
  if (p.dequantized_experts) {  // before a user fills a disk: the experts grow about 4x
    char growth[160];
    std::snprintf(growth, sizeof growth, "%.2f GB MXFP4 -> %.2f GB BF16 (%.1fx); output total %.2f GB",
                  static_cast<double>(p.expert_bytes_in) / 1e9, static_cast<double>(p.expert_bytes_out) / 1e9,
                  p.expert_bytes_in ? static_cast<double>(p.expert_bytes_out) / static_cast<double>(p.expert_bytes_in) : 0.0,
                  static_cast<double>(p.shard_bytes_out + p.side_bytes) / 1e9);
    out << "  experts: " << with_commas(p.dequantized_experts) << " MXFP4 weights to BF16: " << growth << " ("
        << with_commas(p.expert_bytes_in) << " -> " << with_commas(p.expert_bytes_out) << " bytes)\n";
  }
  if (!o.finalize) print_partition(r, o, out);
  out << "  disk needed " << with_commas(r.disk_needed) << " bytes, free " << with_commas(r.disk_free)
      << (r.dry_run && r.disk_needed > r.disk_free ? " -- NOT ENOUGH: the conversion would stop before writing" : "")
      << "\n";
}

void print_convert_human(const ConvertReport& r, const ConvertOptions& o, std::ostream& out, bool plan_shown) {
  const ConversionPlan& p = r.plan;
  for (const auto& f : r.findings.items())
    out << "  " << finding_text(f) << "\n";
  for (const auto& line : r.findings.omitted_lines()) out << "  " << display_escape(line) << "\n";
  if (r.status != ConvertStatus::ok) {
    out << "ckpt convert: FAILED (" << convert_status_name(r.status) << ")\n";
    return;
  }
  if (o.finalize) {
    print_partition(r, o, out);
    out << (r.dry_run ? "checked " : "finalized ") << display_escape(o.output) << "\n";
    return;
  }
  if (r.dry_run) {
    out << "plan for " << display_escape(o.input) << " -> " << display_escape(o.output) << " (dry run, nothing written)\n";
    for (const auto& s : p.shards)
      out << "  " << display_escape(s.name) << ": " << s.converted << " converted, " << s.copied << " copied, " << s.dropped_scales
          << " scales dropped, " << with_commas(s.file_bytes) << " bytes\n";
    if (!p.quant_profile.empty()) {
      out << "  quantization profile " << display_escape(p.quant_profile) << " (schemas/quant/"
          << display_escape(p.quant_profile) << ".json";
      if (p.pairing.scheme.config_file != "config.json") out << ", read from " << display_escape(p.pairing.scheme.config_file);
      out << "): dequantizes " << with_commas(p.dequantized_tensors.size()) << " tensors to BF16";
      if (p.dropped_activation_scales) out << ", drops " << with_commas(p.dropped_activation_scales) << " activation scales";
      out << "\n";
      for (const auto& f : p.dropped_side_files)
        out << "  " << display_escape(f) << " not copied: its quantization is gone from the output\n";
      constexpr size_t kListed = 200;
      for (size_t i = 0; i < p.dequantized_tensors.size() && i < kListed; ++i)
        out << "    " << display_escape(p.dequantized_tensors[i]) << "\n";
      if (p.dequantized_tensors.size() > kListed)
        out << "    ... and " << with_commas(p.dequantized_tensors.size() - kListed) << " more\n";
    }
  }
  if (!plan_shown) print_convert_plan(r, o, out);
  for (const auto& [index, st] : r.remap_stats)
    if (st.overflow || st.vanished_nonzero)
      out << "  " << display_escape(p.fused[index].block) << " " << display_escape(p.fused[index].matrix) << ": " << st.vanished_nonzero
          << " nonzero weights remapped to 0, " << st.overflow << " overflows\n";
  if (r.dry_run) return;
  char rate[96];
  double gbps = r.seconds > 0 ? static_cast<double>(r.bytes_written) / r.seconds / 1e9 : 0;
  std::snprintf(rate, sizeof rate, "%.2f s (%.2f GB/s), peak memory %.0f MiB", r.seconds, gbps,
                static_cast<double>(r.peak_rss_bytes) / (1 << 20));
  if (r.partition.active())
    out << "  partition " << r.partition.text() << ": " << r.shards_written + r.shards_resumed << " of "
        << p.shards.size() << " shards are this partition's; run --finalize when every partition is done\n";
  out << "  read " << with_commas(p.bytes_in) << " bytes, wrote " << r.shards_written << " shards ("
      << r.shards_resumed << " already done), " << with_commas(r.bytes_written) << " bytes in " << rate << "\n";
  out << "converted " << display_escape(o.input) << " -> " << display_escape(o.output) << "\n";
}

}  // namespace ckpt
